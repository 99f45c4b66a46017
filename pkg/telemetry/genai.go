package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// SchemaURL is the semantic conventions version the spans and metrics follow. GenAI names left
// the main conventions after it (v1.42.0 removes them); the few names only the GenAI
// repository defines yet (gen_ai.execute_tool.duration) are literals below.
const SchemaURL = semconv.SchemaURL

// AgentName is gen_ai.agent.name of the invoke_agent span.
const AgentName = "codeinterp"

// Attributes of ours (not in the conventions).
const (
	attrRound         = attribute.Key("codeinterp.round")
	attrSurface       = attribute.Key("codeinterp.surface")
	attrOutcome       = attribute.Key("codeinterp.outcome")
	attrContainerID   = attribute.Key("codeinterp.container.id")
	attrContainerFrom = attribute.Key("codeinterp.container.source")
	attrOrigin        = attribute.Key("codeinterp.container.origin")
	attrNode          = attribute.Key("codeinterp.sandbox.node")
	attrStartMode     = attribute.Key("codeinterp.sandbox.start_mode")
	attrRounds        = attribute.Key("codeinterp.rounds")
	attrCalls         = attribute.Key("codeinterp.calls")
	attrStatus        = attribute.Key("http.response.status_code")
)

// Error types of execute_tool spans (error.type), low-cardinality and documented in
// docs/operations.md.
const (
	ToolErrorTimeout     = "timeout"
	ToolErrorLost        = "sandbox_lost"
	ToolErrorUnavailable = "sandbox_unavailable"
	ToolErrorFiles       = "files_unavailable"
	ToolErrorInvalidArgs = "invalid_arguments"
	ToolErrorCallLimit   = "call_limit"
	// ToolErrorException: the code raised; ToolErrorOOM: it raised MemoryError (the
	// container's memory limit); ToolErrorOutputLimit: it ran, but its output was cut at the
	// sandbox's output limit.
	ToolErrorOOM         = "oom"
	ToolErrorOutputLimit = "output_limit"
	ToolErrorRepeated    = "repeated"
	ToolErrorException   = "exception"
)

// GenAI makes the GenAI spans and records the GenAI metrics. A nil *GenAI is off: every method
// returns at once, with nil spans, whose methods do nothing either. It is safe for concurrent
// use; the spans it returns are not (each belongs to one loop).
type GenAI struct {
	tracer     trace.Tracer
	prop       propagation.TextMapPropagator
	content    bool // tool calls' code and results
	messages   bool // prompts and completions
	maxContent int
	metrics    bool

	opDuration   genaiconv.ClientOperationDuration
	tokens       genaiconv.ClientTokenUsage
	toolDuration metric.Float64Histogram
	acquire      metric.Float64Histogram
	copyFiles    metric.Float64Histogram
	start        metric.Float64Histogram
}

// Content says what content the spans carry; the zero value is none. Content is the tenants'
// data: none is the default everywhere.
type Content struct {
	// Tools: execute_tool spans carry the code a call ran (gen_ai.tool.call.arguments) and
	// the text fed back to the model (gen_ai.tool.call.result).
	Tools bool
	// Messages: chat spans carry the round's prompt (gen_ai.input.messages,
	// gen_ai.system_instructions) and the model's answer (gen_ai.output.messages), as the
	// conventions shape them.
	Messages bool
	// MaxBytes bounds each content attribute; zero means DefaultMaxContentBytes.
	MaxBytes int
}

// NewGenAI returns the instruments over tp and mp (nil: no metrics), propagating trace context
// with prop, and recording the content c asks for.
func NewGenAI(tp trace.TracerProvider, mp metric.MeterProvider, prop propagation.TextMapPropagator, c Content) (*GenAI, error) {
	maxContent := c.MaxBytes
	if maxContent <= 0 {
		maxContent = DefaultMaxContentBytes
	}
	g := &GenAI{
		tracer:     tp.Tracer("github.com/codeinterp/codeinterp", trace.WithSchemaURL(SchemaURL)),
		prop:       prop,
		content:    c.Tools,
		messages:   c.Messages,
		maxContent: maxContent,
		metrics:    mp != nil,
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/codeinterp/codeinterp", metric.WithSchemaURL(SchemaURL))
	var err error
	secondsBuckets := metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
	if g.opDuration, err = genaiconv.NewClientOperationDuration(m, secondsBuckets); err != nil {
		return nil, fmt.Errorf("gen_ai.client.operation.duration: %w", err)
	}
	if g.tokens, err = genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(
		1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)); err != nil {
		return nil, fmt.Errorf("gen_ai.client.token.usage: %w", err)
	}
	if g.toolDuration, err = m.Float64Histogram("gen_ai.execute_tool.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a tool execution."), secondsBuckets); err != nil {
		return nil, fmt.Errorf("gen_ai.execute_tool.duration: %w", err)
	}
	if g.acquire, err = m.Float64Histogram("codeinterp.sandbox.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to acquire a request's sandbox (its container named, not yet started)."), secondsBuckets); err != nil {
		return nil, fmt.Errorf("codeinterp.sandbox.acquire.duration: %w", err)
	}
	if g.copyFiles, err = m.Float64Histogram("codeinterp.sandbox.copy_files.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to copy a request's container.file_ids into its container."), secondsBuckets); err != nil {
		return nil, fmt.Errorf("codeinterp.sandbox.copy_files.duration: %w", err)
	}
	if g.start, err = m.Float64Histogram("codeinterp.sandbox.start.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to start a new container for a request (a cold start; one taken from the warm pool is not counted)."), secondsBuckets); err != nil {
		return nil, fmt.Errorf("codeinterp.sandbox.start.duration: %w", err)
	}
	return g, nil
}

// FromIncoming returns ctx with the remote span context of the gRPC stream's incoming
// metadata: Envoy's tracer injects its ext_proc client span ("async
// envoy.service.ext_proc.v3.ExternalProcessor.Process egress") as traceparent/tracestate.
func (g *GenAI) FromIncoming(ctx context.Context) context.Context {
	if g == nil {
		return ctx
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return g.prop.Extract(ctx, mdCarrier(md))
}

// mdCarrier reads gRPC metadata as a propagation carrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Provider returns gen_ai.provider.name of an API surface's upstream.
func Provider(surface string) genaiconv.ProviderNameAttr {
	if surface == "messages" {
		return genaiconv.ProviderNameAnthropic
	}
	return genaiconv.ProviderNameOpenAI
}

// ToolName returns gen_ai.tool.name of the hosted code tool of an API surface.
func ToolName(surface string) string {
	if surface == "messages" {
		return "code_execution"
	}
	return "code_interpreter"
}

// Agent is the invoke_agent span of one loop. Not safe for concurrent use.
type Agent struct {
	g        *GenAI
	span     trace.Span
	surface  string
	provider genaiconv.ProviderNameAttr
	model    string
	in, out  int
}

// StartAgent starts the invoke_agent span of a loop over a request of surface whose body is
// requestBody (its "model" names the spans); ctx carries the parent (see FromIncoming).
func (g *GenAI) StartAgent(ctx context.Context, surface string, requestBody []byte) (context.Context, *Agent) {
	if g == nil {
		return ctx, nil
	}
	a := &Agent{g: g, surface: surface, provider: Provider(surface), model: requestModel(requestBody)}
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIProviderNameKey.String(string(a.provider)),
		semconv.GenAIAgentName(AgentName),
		attrSurface.String(surface),
	}
	if a.model != "" {
		attrs = append(attrs, semconv.GenAIRequestModel(a.model))
	}
	ctx, a.span = g.tracer.Start(ctx, "invoke_agent "+AgentName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, a
}

// Conversation sets gen_ai.conversation.id: the container the loop's code runs in, and how it
// was chosen (session, container id, new).
func (a *Agent) Conversation(containerID, source string) {
	if a == nil || !a.span.IsRecording() {
		return
	}
	a.span.SetAttributes(semconv.GenAIConversationID(containerID), attrContainerFrom.String(source))
}

// End ends the span with the loop's outcome (its stop reason) and the answer's status.
func (a *Agent) End(outcome string, status, rounds, calls int) {
	if a == nil {
		return
	}
	if a.span.IsRecording() {
		a.span.SetAttributes(attrOutcome.String(outcome), attrStatus.Int(status), attrRounds.Int(rounds), attrCalls.Int(calls),
			semconv.GenAIUsageInputTokens(a.in), semconv.GenAIUsageOutputTokens(a.out))
		if status >= 400 || status == 0 {
			a.span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
			a.span.SetStatus(codes.Error, outcome)
		}
	}
	a.span.End()
}

// Chat is the chat span of one upstream round. Not safe for concurrent use.
type Chat struct {
	a      *Agent
	ctx    context.Context
	span   trace.Span
	start  time.Time
	first  time.Time
	stream bool
}

// StartChat starts the chat span of round (0: the first call, which Envoy sent) at start.
func (a *Agent) StartChat(ctx context.Context, round int, start time.Time, stream bool) (context.Context, *Chat) {
	if a == nil {
		return ctx, nil
	}
	if start.IsZero() {
		start = time.Now()
	}
	name := "chat"
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(string(a.provider)),
		semconv.GenAIRequestStream(stream),
		attrRound.Int(round),
	}
	if a.model != "" {
		name += " " + a.model
		attrs = append(attrs, semconv.GenAIRequestModel(a.model))
	}
	c := &Chat{a: a, start: start, stream: stream}
	c.ctx, c.span = a.g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return c.ctx, c
}

// Input records the round's request body, as gen_ai.input.messages and
// gen_ai.system_instructions, when message capture is on (else it does nothing).
func (c *Chat) Input(body []byte) {
	if c == nil || !c.a.g.messages || !c.span.IsRecording() {
		return
	}
	g := c.a.g
	system, msgs := inputMessages(c.a.surface, body)
	if v := encodeBounded(system, g.maxContent, cutPart); v != "" {
		c.span.SetAttributes(semconv.GenAISystemInstructionsKey.String(v))
	}
	if v := encodeBounded(msgs, g.maxContent, cutMessage); v != "" {
		c.span.SetAttributes(semconv.GenAIInputMessagesKey.String(v))
	}
}

// Inject writes the span's context into h as traceparent (and tracestate), so that the
// follow-up call's spans (Envoy's, the model's) continue the trace under it.
func (c *Chat) Inject(h http.Header) {
	if c == nil {
		return
	}
	c.a.g.prop.Inject(c.ctx, propagation.HeaderCarrier(h))
}

// FirstChunk records that the first chunk of a streamed answer arrived now (once).
func (c *Chat) FirstChunk() {
	if c != nil && c.first.IsZero() {
		c.first = time.Now()
	}
}

// End ends the span with the upstream's answer: status (0 when none came, with err), and its
// body, from which the response id, model, finish reasons and usage are read.
func (c *Chat) End(status int, body []byte, err error) {
	if c == nil {
		return
	}
	g := c.a.g
	errType := ""
	switch {
	case err != nil:
		errType = semconv.ErrorTypeOther.Value.AsString()
	case status != http.StatusOK:
		errType = strconv.Itoa(status)
	}
	recording := c.span.IsRecording()
	var s Summary
	if (recording || g.metrics) && status == http.StatusOK {
		s = Summarize(body)
		c.a.in += s.InputTokens
		c.a.out += s.OutputTokens
	}
	if recording {
		attrs := make([]attribute.KeyValue, 0, 10)
		if s.ID != "" {
			attrs = append(attrs, semconv.GenAIResponseID(s.ID))
		}
		if s.Model != "" {
			attrs = append(attrs, semconv.GenAIResponseModel(s.Model))
		}
		if len(s.FinishReasons) > 0 {
			attrs = append(attrs, semconv.GenAIResponseFinishReasons(s.FinishReasons...))
		}
		if s.Usage {
			attrs = append(attrs, semconv.GenAIUsageInputTokens(s.InputTokens), semconv.GenAIUsageOutputTokens(s.OutputTokens))
			if s.CacheReadTokens > 0 {
				attrs = append(attrs, semconv.GenAIUsageCacheReadInputTokens(s.CacheReadTokens))
			}
			if s.CacheCreationTokens > 0 {
				attrs = append(attrs, semconv.GenAIUsageCacheCreationInputTokens(s.CacheCreationTokens))
			}
			if s.ReasoningTokens > 0 {
				attrs = append(attrs, semconv.GenAIUsageReasoningOutputTokens(s.ReasoningTokens))
			}
		}
		if c.stream && !c.first.IsZero() {
			attrs = append(attrs, semconv.GenAIResponseTimeToFirstChunk(c.first.Sub(c.start).Seconds()))
		}
		if status != 0 {
			attrs = append(attrs, attrStatus.Int(status))
		}
		if errType != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
			c.span.SetStatus(codes.Error, errType)
		}
		if g.messages && status == http.StatusOK {
			if v := encodeBounded(outputMessages(body), g.maxContent, cutMessage); v != "" {
				attrs = append(attrs, semconv.GenAIOutputMessagesKey.String(v))
			}
		}
		c.span.SetAttributes(attrs...)
	}
	c.span.End()
	if !g.metrics {
		return
	}
	ctx := context.Background()
	common := make([]attribute.KeyValue, 0, 3)
	if c.a.model != "" {
		common = append(common, semconv.GenAIRequestModel(c.a.model))
	}
	if s.Model != "" {
		common = append(common, semconv.GenAIResponseModel(s.Model))
	}
	dur := common
	if errType != "" {
		dur = append(dur[:len(dur):len(dur)], semconv.ErrorTypeKey.String(errType))
	}
	c.a.g.opDuration.Record(ctx, time.Since(c.start).Seconds(), genaiconv.OperationNameChat, c.a.provider, dur...)
	if s.Usage {
		g.tokens.Record(ctx, int64(s.InputTokens), genaiconv.OperationNameChat, c.a.provider, genaiconv.TokenTypeInput, common...)
		g.tokens.Record(ctx, int64(s.OutputTokens), genaiconv.OperationNameChat, c.a.provider, genaiconv.TokenTypeOutput, common...)
	}
}

// Tool is the execute_tool span of one code call. Not safe for concurrent use.
type Tool struct {
	a     *Agent
	span  trace.Span
	name  string
	start time.Time
}

// StartTool starts the execute_tool span of the call callID of the hosted tool named tool
// ("" for the surface's code tool, see ToolName), which runs code.
func (a *Agent) StartTool(ctx context.Context, callID, tool, code string) (context.Context, *Tool) {
	if a == nil {
		return ctx, nil
	}
	name := tool
	if name == "" {
		name = ToolName(a.surface)
	}
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(name),
		semconv.GenAIToolTypeKey.String("extension"), // executed on the agent's side, not the client's
	}
	if callID != "" {
		attrs = append(attrs, semconv.GenAIToolCallID(callID))
	}
	if a.g.content {
		attrs = append(attrs, semconv.GenAIToolCallArgumentsKey.String(a.g.cut(code)))
	}
	t := &Tool{a: a, name: name, start: time.Now()}
	ctx, t.span = a.g.tracer.Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(t.start),
		trace.WithAttributes(attrs...))
	return ctx, t
}

// Container is what an execute_tool span says of the container its code ran in (the loop's
// view of a sandbox.AcquireInfo).
type Container struct {
	// ID is the container id; "" when the call had none.
	ID string
	// Node is the sandbox node holding it; "" in a single process.
	Node string
	// Origin is "new", "pooled" or "reused" (sandbox.Origin*); "" when it never started.
	Origin string
	// StartMode is how the backend started it ("fork", "exec"); "" when it does not say.
	StartMode string
	// Started and StartDuration are the container's start, when this call started it (a new
	// container); zero otherwise. The span start_container records them.
	Started       time.Time
	StartDuration time.Duration
}

// StepStartContainer is the span of a new container's start, a child of the execute_tool span
// of the call that started it.
const StepStartContainer = "start_container"

// End ends the span: the container the code ran in (a start_container child span when the
// call started it), errType ("" when the run succeeded; one of the ToolError* values) and the
// text the model was given (recorded only with content on).
func (t *Tool) End(c Container, errType, result string) {
	if t == nil {
		return
	}
	if !c.Started.IsZero() {
		t.startContainer(c)
	}
	if t.span.IsRecording() {
		if c.ID != "" {
			t.span.SetAttributes(attrContainerID.String(c.ID))
		}
		if c.Node != "" {
			t.span.SetAttributes(attrNode.String(c.Node))
		}
		if c.Origin != "" {
			t.span.SetAttributes(attrOrigin.String(c.Origin))
		}
		if c.StartMode != "" {
			t.span.SetAttributes(attrStartMode.String(c.StartMode))
		}
		if errType != "" {
			t.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			t.span.SetStatus(codes.Error, errType)
		}
		if t.a.g.content && result != "" {
			t.span.SetAttributes(semconv.GenAIToolCallResultKey.String(t.a.g.cut(result)))
		}
	}
	t.span.End()
	if t.a.g.metrics {
		attrs := []attribute.KeyValue{semconv.GenAIToolName(t.name), semconv.GenAIToolTypeKey.String("extension")}
		if errType != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		}
		t.a.g.toolDuration.Record(context.Background(), time.Since(t.start).Seconds(), metric.WithAttributes(attrs...))
	}
}

// startContainer records c's start: the start_container span, under the tool's, and the
// start histogram. The start is placed within the tool's span: a start another node timed
// (its clock) keeps its duration, moved into the span if the clocks disagree.
func (t *Tool) startContainer(c Container) {
	g := t.a.g
	if g.metrics {
		var attrs []attribute.KeyValue
		if c.StartMode != "" {
			attrs = append(attrs, attrStartMode.String(c.StartMode))
		}
		g.start.Record(context.Background(), c.StartDuration.Seconds(), metric.WithAttributes(attrs...))
	}
	if !t.span.IsRecording() {
		return
	}
	now := time.Now()
	begin := c.Started
	if latest := now.Add(-c.StartDuration); begin.After(latest) {
		begin = latest
	}
	if begin.Before(t.start) {
		begin = t.start
	}
	attrs := []attribute.KeyValue{attrContainerID.String(c.ID)}
	if c.Node != "" {
		attrs = append(attrs, attrNode.String(c.Node))
	}
	if c.StartMode != "" {
		attrs = append(attrs, attrStartMode.String(c.StartMode))
	}
	ctx := trace.ContextWithSpan(context.Background(), t.span)
	_, span := g.tracer.Start(ctx, StepStartContainer, trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(begin),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(begin.Add(c.StartDuration)))
}

// The steps of a loop that get a span of their own.
const (
	StepAcquire   = "acquire_sandbox"
	StepCopyFiles = "copy_files"
)

// Step is the span of one step of the loop (StepAcquire, StepCopyFiles). Not safe for
// concurrent use.
type Step struct {
	a     *Agent
	name  string
	span  trace.Span
	start time.Time
}

// StartStep starts the span of the step name.
func (a *Agent) StartStep(ctx context.Context, name string) (context.Context, *Step) {
	if a == nil {
		return ctx, nil
	}
	s := &Step{a: a, name: name, start: time.Now()}
	ctx, s.span = a.g.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, s
}

// End ends the step, failed when err is not nil (its text is not recorded: it may name
// addresses or paths).
func (s *Step) End(err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.span.SetAttributes(semconv.ErrorTypeOther)
		s.span.SetStatus(codes.Error, "")
	}
	s.span.End()
	if !s.a.g.metrics {
		return
	}
	h := s.a.g.acquire
	if s.name == StepCopyFiles {
		h = s.a.g.copyFiles
	}
	h.Record(context.Background(), time.Since(s.start).Seconds())
}

// cut returns s cut to the content limit, on a rune boundary.
func (g *GenAI) cut(s string) string { return cutString(s, g.maxContent) }

// cutString returns s cut to at most max bytes, on a rune boundary, marked with an ellipsis
// (which the bound does not count).
func cutString(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
