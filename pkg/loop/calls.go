package loop

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/telemetry"
)

// The fixed texts fed to the model instead of a run's output when the run could not happen or
// did not finish. They are part of the product's documented behaviour (docs/surfaces.md, "Failures").
const (
	// TextSandboxUnavailable answers a call when no sandbox could be had; the code did not run.
	TextSandboxUnavailable = "[sandbox unavailable: the code was not run. Answer without running code, or say that code execution is unavailable right now.]"
	// TextFilesUnavailable answers a call when the files of the tool's container.file_ids
	// could not be copied into the container; the code did not run.
	TextFilesUnavailable = "[files unavailable: the files attached to this request could not be copied into /mnt/data, so the code was not run. Answer without them, or say that the files could not be read.]"
	// TextSandboxLost answers a call whose sandbox died while running it.
	TextSandboxLost = "[sandbox lost: the sandbox stopped while running this code. Its result and all earlier state (variables, imports, files in /mnt/data) are gone; the next call starts in a fresh sandbox.]"
	// TextTimeout is prefixed to what a timed-out run printed before it was interrupted.
	TextTimeout = "[execution timed out after %s and was interrupted]"
	// TextTimeoutKilled follows TextTimeout when the interrupt did not stop the code.
	TextTimeoutKilled = "[the code did not stop when interrupted, so the sandbox was reset: all earlier state is gone]"
	// TextInvalidArguments answers a call whose arguments are not {"code": "<python>"}; nothing ran.
	TextInvalidArguments = `[invalid tool arguments: expected a JSON object like {"code": "print(1)"}; nothing was run]`
	// TextRepeated answers a call of code that already ran in this request; it is not run again.
	TextRepeated = "[not run: this exact code already ran for this request and its output is above. Answer the user now.]"
	// TextRoundLimit is appended to the outputs of the last round the loop allows.
	TextRoundLimit = "[round limit reached: no more code can run for this request. Answer the user with what you have.]"
	// TextNoOutput answers a run that showed nothing.
	TextNoOutput = "[the code ran and produced no output]"
	// TextCallLimit answers, without running it, a call beyond the turn's max_calls_per_turn.
	TextCallLimit = "[not run: one turn may run at most %d code calls. Run this code in a later turn, or combine the code into fewer calls.]"
	// TextOutputBudget marks output left out because the request's output budget
	// (max_output_bytes, max_images) is used up; it is shown to the client as a logs output
	// and to the model in the run's text.
	TextOutputBudget = "[output limit of this request reached: %s not shown to the user]"
)

// Statuses of a code_interpreter_call item.
const (
	statusCompleted = "completed"
	statusFailed    = "failed"
)

// runCalls runs one round's calls in order and returns their items, the texts fed back to the
// model, and whether the round repeated earlier code.
func (lr *loopRun) runCalls(ctx context.Context, calls []schema.Call, round int, last bool) ([]schema.CodeCall, []schema.CallOutput, bool) {
	items := make([]schema.CodeCall, 0, len(calls))
	outputs := make([]schema.CallOutput, 0, len(calls))
	repeated := false
	maxCalls := lr.r.MaxCallsPerTurn
	for i, c := range calls {
		item := schema.CodeCall{ID: lr.callID(round, i, c.CallID), Code: c.Code, Status: "in_progress", Outputs: []schema.CodeOutput{}}
		ctx, tool := lr.agent.StartTool(ctx, c.CallID, c.Tool, c.Code)
		errType := ""
		if lr.r.Sink != nil {
			// The item names its container from the start: acquiring only names it, the
			// container starts on the first run.
			if lease, err := lr.ensureLease(ctx); err == nil {
				item.ContainerID = lease.ContainerID()
			}
		}
		started := item
		lr.emit(schema.Event{Kind: schema.EventCallStarted, Round: round, Call: &started})
		item.Status = statusCompleted
		var text string
		switch {
		case i >= maxCalls:
			item.Status, text = statusFailed, fmt.Sprintf(TextCallLimit, maxCalls)
			errType = telemetry.ToolErrorCallLimit
			lr.e.metrics.runs.WithLabelValues("call_limit").Inc()
		case c.ArgsErr != nil:
			item.Status, text = statusFailed, TextInvalidArguments
			errType = telemetry.ToolErrorInvalidArgs
			lr.e.metrics.runs.WithLabelValues("invalid_arguments").Inc()
		case lr.stopped(ctx) != nil:
			// The loop is over (deadline or client gone): the call is left unanswered and its
			// item incomplete.
			item.Status, text = "incomplete", ""
			errType = ctxErrType(ctx)
		default:
			if _, ok := lr.seen[c.Code]; ok {
				item.Status, text = statusFailed, TextRepeated
				errType = telemetry.ToolErrorRepeated
				repeated = true
				lr.e.metrics.runs.WithLabelValues("repeat").Inc()
				break
			}
			var ran bool
			if text, ran, errType = lr.runOne(ctx, &item, nil); ran {
				// Code that could not run (no sandbox, or it was lost) may be sent again.
				lr.seen[c.Code] = round
			}
		}
		if item.ContainerID == "" {
			// Every item names its container, also when its code did not run.
			if lease, err := lr.ensureLease(ctx); err == nil {
				item.ContainerID = lease.ContainerID()
			}
		}
		if last && text != "" {
			text += "\n" + TextRoundLimit
		}
		if text != "" && item.Status != statusCompleted && len(item.Outputs) == 0 {
			item.Outputs = append(item.Outputs, schema.CodeOutput{Type: "logs", Logs: text})
		}
		tool.End(lr.toolContainer(item.ContainerID), errType, text)
		items = append(items, item)
		outputs = append(outputs, schema.CallOutput{CallID: c.CallID, Output: text})
		done := item
		lr.emit(schema.Event{Kind: schema.EventCallDone, Round: round, Call: &done})
		if lr.paused {
			// The answer ends with the paused run's calls; the round's later calls are not run.
			break
		}
	}
	return items, outputs, repeated
}

// callID returns the item id of the call of the function number i of round whose call id is
// callID: the one the exchange's stream already showed the client, else a new one.
func (lr *loopRun) callID(round, i int, callID string) string {
	if ids, ok := lr.r.Exchange.(schema.CallIDs); ok {
		if id := ids.CodeCallID(round, i, callID); id != "" {
			return id
		}
	}
	return lr.e.newID("ci_")
}

// ensureLease returns the request's sandbox lease, acquiring it on first use. Acquiring names the
// container without starting it; it starts on the first run.
func (lr *loopRun) ensureLease(ctx context.Context) (*sandbox.Lease, error) {
	if lr.lease != nil {
		return lr.lease, nil
	}
	ctx, step := lr.agent.StartStep(ctx, telemetry.StepAcquire)
	lease, err := lr.e.sandboxes.Acquire(ctx, lr.r.Sandbox)
	step.End(err)
	if err != nil {
		return nil, err
	}
	lr.lease = lease
	if lr.agent != nil {
		source := "new"
		switch {
		case lr.r.Sandbox.ContainerID != "":
			source = "container_id"
		case lr.r.Sandbox.Session != "":
			source = "session"
		}
		lr.agent.Conversation(lease.ContainerID(), source)
	}
	return lease, nil
}

// toolContainer is what a call's execute_tool span says of its container id: how the lease
// got it, when telemetry is on. A new or pooled container is so only for the first call that
// sees it; the request's later calls reuse it.
func (lr *loopRun) toolContainer(id string) telemetry.Container {
	c := telemetry.Container{ID: id}
	if lr.agent == nil || lr.lease == nil {
		return c
	}
	info := lr.lease.Info()
	if info.Container != id {
		return c
	}
	c.Node, c.Origin, c.StartMode = info.Node, info.Origin, info.StartMode
	if info.Origin == sandbox.OriginNew || info.Origin == sandbox.OriginPooled {
		if lr.startShown == id {
			c.Origin = sandbox.OriginReused
		} else {
			lr.startShown = id
			c.Started, c.StartDuration = info.Started, info.StartDuration
		}
	}
	return c
}

// ctxErrType is the error.type of a tool call the loop's end left unanswered.
func ctxErrType(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "deadline"
	}
	return "canceled"
}

// runOne runs one call's code in the request's sandbox and fills item; it returns the text fed
// back to the model, whether the code ran to a result (finished or timed out) rather than
// not at all or in a sandbox that was lost, and the run's error type for telemetry ("" when
// it succeeded; see the telemetry.ToolError* values). With resume, it resumes the container's
// paused run with those results instead of running item's code; a run no longer paused sets
// lr.gone.
func (lr *loopRun) runOne(ctx context.Context, item *schema.CodeCall, resume []sandbox.ToolResult) (string, bool, string) {
	lease, err := lr.ensureLease(ctx)
	if err != nil {
		lr.e.log.Warn("acquire sandbox", zap.Error(err))
		lr.e.metrics.runs.WithLabelValues("unavailable").Inc()
		item.Status = statusFailed
		return TextSandboxUnavailable, false, telemetry.ToolErrorUnavailable
	}
	if resume != nil {
		// The paused run's container had them copied before it ran.
		lr.inputsIn = lease.ContainerID()
	}
	if len(lr.r.InputFiles) > 0 && lr.inputsIn != lease.ContainerID() {
		// First run, or the container was lost and replaced by a fresh one.
		sctx, step := lr.agent.StartStep(ctx, telemetry.StepCopyFiles)
		err := lr.copyInputs(sctx, lease)
		step.End(err)
		if err != nil {
			if ctx.Err() != nil {
				item.Status = "incomplete"
				return "", false, ctxErrType(ctx)
			}
			lr.e.log.Warn("copy container.file_ids into the container", zap.Error(err))
			lr.e.metrics.runs.WithLabelValues("files_unavailable").Inc()
			item.Status = statusFailed
			return TextFilesUnavailable, false, telemetry.ToolErrorFiles
		}
		lr.inputsIn = lease.ContainerID()
	}
	timeout := lr.r.RunTimeout
	if dl, ok := ctx.Deadline(); ok {
		// Leave time for the follow-up call: a run may use at most half of what is left.
		if left := time.Until(dl) / 2; timeout == 0 || left < timeout {
			timeout = left
		}
	}
	lr.calls++
	start := time.Now()
	res, err := lr.runPausable(ctx, lease, item.Code, resume, timeout)
	lr.e.metrics.runSeconds.Observe(time.Since(start).Seconds())
	item.ContainerID = lease.ContainerID()
	item.Files = codeFiles(res.Files)
	limit := lr.r.OutputLimit
	switch {
	case resume != nil && errors.Is(err, sandbox.ErrNotPaused):
		lr.e.metrics.runs.WithLabelValues("not_paused").Inc()
		lr.gone = true
		item.Status = statusFailed
		return "", false, telemetry.ToolErrorUnavailable
	case err == nil && len(res.Calls) > 0:
		// Paused on the client's tools: the run's result comes with a later request.
		lr.e.metrics.runs.WithLabelValues("paused").Inc()
		lr.pauseItem(item, res.Calls)
		return "", true, ""
	case err == nil:
		lr.e.metrics.runs.WithLabelValues("ok").Inc()
		item.Run = codeRun(res, limit, false)
		errType := ""
		switch {
		case res.Error != nil && res.Error.Name == "MemoryError":
			errType = telemetry.ToolErrorOOM
		case res.Error != nil:
			errType = telemetry.ToolErrorException
		case res.Truncated:
			errType = telemetry.ToolErrorOutputLimit
		}
		return lr.show(res, limit, item), true, errType
	case errors.Is(err, sandbox.ErrTimeout):
		lr.e.metrics.runs.WithLabelValues("timeout").Inc()
		item.Status = statusFailed
		notice := fmt.Sprintf(TextTimeout, timeout.Round(100*time.Millisecond))
		if errors.Is(err, sandbox.ErrLost) {
			notice += "\n" + TextTimeoutKilled
		}
		res.Images = nil // a timed-out run's images are not shown
		item.Run = codeRun(res, limit, true)
		text, logs := notice, notice
		if partial, _ := render(res, limit); partial != TextNoOutput {
			text += "\n" + partial
			// What it printed counts against the request's output budget, as a finished run's
			// does; the notice, like the markers, does not.
			shown, cut := lr.chargeLogs(partial)
			if shown != "" {
				logs += "\n" + shown
			}
			if cut {
				marker := fmt.Sprintf(TextOutputBudget, "the rest of the printed output")
				logs += "\n" + marker
				text += "\n" + marker
			}
		}
		item.Outputs = append(item.Outputs, schema.CodeOutput{Type: "logs", Logs: logs})
		return text, true, telemetry.ToolErrorTimeout
	case errors.Is(err, sandbox.ErrLost):
		lr.e.metrics.runs.WithLabelValues("lost").Inc()
		item.Status = statusFailed
		return TextSandboxLost, false, telemetry.ToolErrorLost
	case ctx.Err() != nil:
		item.Status = "incomplete"
		return "", false, ctxErrType(ctx)
	default:
		lr.e.log.Warn("code run failed", zap.Error(err))
		lr.e.metrics.runs.WithLabelValues("unavailable").Inc()
		item.Status = statusFailed
		return TextSandboxUnavailable, false, telemetry.ToolErrorUnavailable
	}
}

// copyInputs copies the request's InputFiles into the lease's container, as
// /mnt/data/<name>: each is fetched from the Files API and written as it arrives. A file that
// fails leaves nothing of itself (PutFile is atomic); those copied before it stay, and are
// copied again, replacing themselves, by the next try.
func (lr *loopRun) copyInputs(ctx context.Context, lease *sandbox.Lease) error {
	if lr.r.Files == nil {
		return errors.New("copy files: no Files API")
	}
	limit := lr.r.MaxInputFileBytes
	for _, f := range lr.r.InputFiles {
		name, content, err := lr.r.Files.Fetch(ctx, f.ID)
		if err != nil {
			return fmt.Errorf("fetch file %s: %w", f.ID, err)
		}
		name = path.Base(name)
		if name == "." || name == "/" || name == ".." {
			content.Close()
			return fmt.Errorf("fetch file %s: its name %q cannot name a file", f.ID, name)
		}
		_, err = lease.PutFile(ctx, "/mnt/data/"+name, sandbox.SourceUser, content, limit)
		content.Close()
		if err != nil {
			return fmt.Errorf("copy file %s: %w", f.ID, err)
		}
	}
	return nil
}

// codeFiles are the files a run wrote, as a code call names them.
func codeFiles(files []sandbox.File) []schema.CodeFile {
	if len(files) == 0 {
		return nil
	}
	out := make([]schema.CodeFile, len(files))
	for i, f := range files {
		out[i] = schema.CodeFile{ID: f.ID, Path: f.Path, Bytes: f.Size}
	}
	return out
}

// codeRun is a run's result as a script's, each text capped at limit bytes.
func codeRun(res sandbox.Result, limit int, timedOut bool) *schema.CodeRun {
	r := &schema.CodeRun{Stdout: res.Stdout, Stderr: res.Stderr, TimedOut: timedOut}
	if res.Value != "" {
		if r.Stdout != "" && !strings.HasSuffix(r.Stdout, "\n") {
			r.Stdout += "\n"
		}
		r.Stdout += res.Value
	}
	if e := res.Error; e != nil {
		tb := e.Traceback
		if tb == "" {
			tb = e.Name + ": " + e.Value
		}
		if r.Stderr != "" && !strings.HasSuffix(r.Stderr, "\n") {
			r.Stderr += "\n"
		}
		r.Stderr += tb
		r.ReturnCode = 1
	}
	r.Stdout, r.Stderr = capText(r.Stdout, limit), capText(r.Stderr, limit)
	return r
}

// imageURLPrefix starts the data: URL of an image output.
const imageURLPrefix = "data:image/png;base64,"

// show fills item's outputs with what a finished run shows the client, within what is left of
// the request's output budget, and returns the text fed back to the model. Logs beyond the
// budget are cut and images beyond it (or beyond max_images) left out, with a TextOutputBudget
// marker in the logs and in the model's text.
func (lr *loopRun) show(res sandbox.Result, limit int, item *schema.CodeCall) string {
	budget, maxImages := lr.r.MaxOutputBytes, lr.r.MaxImages
	var shown, hidden []sandbox.Image
	for _, img := range res.Images {
		size := len(imageURLPrefix) + base64.StdEncoding.EncodedLen(len(img.PNG))
		if lr.images >= maxImages || lr.outBytes+size > budget {
			hidden = append(hidden, img)
			continue
		}
		lr.images++
		lr.outBytes += size
		shown = append(shown, img)
	}
	res.Images = shown
	text, logs := render(res, limit)
	var left []string
	logs, cut := lr.chargeLogs(logs)
	if cut {
		left = append(left, "the rest of the printed output")
	}
	switch len(hidden) {
	case 0:
	case 1:
		left = append(left, "1 image")
	default:
		left = append(left, fmt.Sprintf("%d images", len(hidden)))
	}
	if len(left) > 0 {
		marker := fmt.Sprintf(TextOutputBudget, strings.Join(left, " and "))
		if logs != "" {
			logs += "\n"
		}
		logs += marker
		if text == TextNoOutput {
			text = marker
		} else {
			text += "\n" + marker
		}
	}
	if logs != "" {
		item.Outputs = append(item.Outputs, schema.CodeOutput{Type: "logs", Logs: logs})
	}
	for _, img := range shown {
		item.Outputs = append(item.Outputs, schema.CodeOutput{Type: "image", URL: imageURLPrefix + base64.StdEncoding.EncodeToString(img.PNG)})
	}
	return text
}

// chargeLogs counts logs shown to the client against the request's output budget: it returns
// what of them fits (cut to what is left, or nothing when less than 256 bytes are) and whether
// any was cut.
func (lr *loopRun) chargeLogs(logs string) (string, bool) {
	budget := lr.r.MaxOutputBytes
	cut := false
	if n := len(logs); n > 0 && lr.outBytes+n > budget {
		keep := budget - lr.outBytes
		if keep >= 256 {
			logs = capText(logs, keep)
		} else {
			logs = ""
		}
		cut = true
	}
	lr.outBytes += len(logs)
	return logs, cut
}

// render turns a run's result into the text fed back to the model (what a notebook shows) and
// the logs shown to the client (the same text without notes meant for the model only). Both are
// capped at limit bytes.
func render(res sandbox.Result, limit int) (text, logs string) {
	var b strings.Builder
	add := func(s string) {
		if s == "" {
			return
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	add(res.Stdout)
	if res.Stderr != "" {
		add("[stderr]\n" + res.Stderr)
	}
	add(res.Value)
	if res.Error != nil {
		tb := res.Error.Traceback
		if tb == "" {
			tb = res.Error.Name + ": " + res.Error.Value
		}
		add(tb)
	}
	if len(res.Files) > 0 {
		names := make([]string, 0, len(res.Files))
		for _, f := range res.Files {
			names = append(names, fmt.Sprintf("%s (%d bytes)", f.Path, f.Size))
		}
		add("[files written: " + strings.Join(names, ", ") + "]")
	}
	// What the list leaves out (too many files, a full file table, a refused path) is told too.
	add(res.FilesNote)
	if res.Truncated {
		add("[output truncated]")
	}
	logs = capText(b.String(), limit)
	text = schema.RenderRun(logs, len(res.Images))
	if text == "" {
		text = TextNoOutput
	}
	return text, logs
}

// capText keeps the head and tail of s within limit bytes, with a marker saying how much was
// cut, never splitting a UTF-8 sequence.
func capText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	marker := fmt.Sprintf("\n[... %d bytes cut ...]\n", len(s)-limit)
	keep := limit - len(marker)
	if keep < 0 {
		keep = 0
	}
	head, tail := keep*3/4, keep-keep*3/4
	i := head
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	j := len(s) - tail
	for j < len(s) && !utf8.RuneStart(s[j]) {
		j++
	}
	h, t := s[:i], s[j:]
	return h + marker + t
}
