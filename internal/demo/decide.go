package demo

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A turn is what the demo model reads of a request, whatever the API surface: the last user
// text, or the output of the tool call that ended the conversation so far, and the code tools
// the request offers.
type turn struct {
	// userText is the text of the last user message (empty when toolOutput is set).
	userText string
	// toolOutput is the output of the last tool call, when the conversation ends with one.
	toolOutput string
	// afterTool reports that the conversation ends with a tool call's output.
	afterTool bool
	// python and bash name the request's tools that take Python code ({"code"}) and a shell
	// command ({"command"}); empty when it has none.
	python, bash string
}

// An action is what the demo model answers: a call of one of the request's tools, or text.
type action struct {
	// tool is the tool to call, with arguments args; empty for a text answer.
	tool string
	args map[string]string
	// text is the answer's text when tool is empty.
	text string
}

// label starts every text the demo model writes, so nobody takes it for a real model.
const label = "[demo model] "

// maxEcho bounds how much of a tool's output the demo model quotes back.
const maxEcho = 2000

// help is the demo model's answer to a message it has nothing to do for.
const help = label + "I am codeinterp's built-in demo model: no real model is behind me, I only follow a few plain instructions to show " +
	"the code tool working. Try: a fenced ```python block (or ```bash on the Messages API), \"What is 6*7? Use Python.\", " +
	"\"Draw a chart of 3, 1, 4, 1, 5\", \"Read data.csv\" (a file you uploaded), or \"List the files\". " +
	"Start codeinterp with UPSTREAM=<a model API> to talk to a real model."

var (
	fenced     = regexp.MustCompile("(?s)```([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```")
	arithmetic = regexp.MustCompile(`[-+(]*\d+(?:\.\d+)?(?:\s*(?:\*\*|[-+*/%])\s*[-+(]*\d+(?:\.\d+)?\)*)+`)
	fileName   = regexp.MustCompile(`\b[\w-]+(?:\.[\w-]+)*\.(?:csv|tsv|txt|json|md|py|log|xlsx|parquet)\b`)
	number     = regexp.MustCompile(`-?\d+(?:\.\d+)?`)
	chartWord  = regexp.MustCompile(`(?i)\b(chart|plot|graph|histogram|draw)\b`)
	listWord   = regexp.MustCompile(`(?i)\b(list|show)\b.*\bfiles?\b`)
)

// decide chooses the demo model's answer to t.
func decide(t turn) action {
	if t.afterTool {
		return action{text: summarize(t.toolOutput)}
	}
	lang, code, ok := wanted(t.userText)
	if !ok {
		return action{text: help}
	}
	if t.python == "" && t.bash == "" {
		return action{text: label + "I would run this, but the request offers no code tool:\n\n```" + lang + "\n" + code + "\n```"}
	}
	if lang == "bash" {
		if t.bash != "" {
			return action{tool: t.bash, args: map[string]string{"command": code}}
		}
		return action{tool: t.python, args: map[string]string{"code": "import subprocess\n" +
			"r = subprocess.run(" + strconv.Quote(code) + ", shell=True, capture_output=True, text=True)\n" +
			"print(r.stdout, end='')\nprint(r.stderr, end='')"}}
	}
	if t.python != "" {
		return action{tool: t.python, args: map[string]string{"code": code}}
	}
	return action{tool: t.bash, args: map[string]string{"command": "python3 - <<'DEMO_PY'\n" + code + "\nDEMO_PY"}}
}

// wanted returns the code a user message asks for, in "python" or "bash", and whether it asks
// for any.
func wanted(text string) (lang, code string, ok bool) {
	if m := fenced.FindStringSubmatch(text); m != nil {
		code = strings.TrimRight(m[2], " \t\r\n")
		switch strings.ToLower(m[1]) {
		case "bash", "sh", "shell", "console":
			return "bash", code, code != ""
		default:
			return "python", code, code != ""
		}
	}
	switch {
	case chartWord.MatchString(text):
		return "python", chartCode(text), true
	case fileName.MatchString(text):
		return "python", readCode(fileName.FindString(text)), true
	case listWord.MatchString(text):
		return "python", "import os\nfor name in sorted(os.listdir('/mnt/data')):\n    print(name, os.path.getsize(os.path.join('/mnt/data', name)))", true
	}
	if expr := arithmetic.FindString(text); expr != "" {
		return "python", "print(" + strings.TrimSpace(expr) + ")", true
	}
	return "", "", false
}

// chartCode draws the numbers of text as a bar chart, or a sine curve when it has fewer than
// two.
func chartCode(text string) string {
	nums := number.FindAllString(text, 50)
	if len(nums) < 2 {
		return "import numpy as np\nimport matplotlib.pyplot as plt\n" +
			"x = np.linspace(0, 2 * np.pi, 200)\nplt.plot(x, np.sin(x))\nplt.title('sin(x)')\nplt.show()"
	}
	return "import matplotlib.pyplot as plt\n" +
		"values = [" + strings.Join(nums, ", ") + "]\n" +
		"plt.bar(range(1, len(values) + 1), values)\nplt.title('Your numbers')\nplt.show()\nprint('sum', sum(values))"
}

// readCode reads a file of the container back: a table's first rows, or a text's first
// characters.
func readCode(name string) string {
	path := strconv.Quote("/mnt/data/" + name)
	if strings.HasSuffix(name, ".csv") || strings.HasSuffix(name, ".tsv") {
		sep := ","
		if strings.HasSuffix(name, ".tsv") {
			sep = "\\t"
		}
		return "import pandas as pd\ndf = pd.read_csv(" + path + ", sep='" + sep + "')\n" +
			"print(df.shape[0], 'rows,', df.shape[1], 'columns')\nprint(df.head(10).to_string())"
	}
	return "with open(" + path + ", errors='replace') as f:\n    print(f.read(" + strconv.Itoa(maxEcho) + "))"
}

// summarize is the demo model's answer once a call has run: what it printed.
func summarize(output string) string {
	out := strings.TrimRight(output, "\n")
	if len(out) > maxEcho {
		out = out[:maxEcho] + "\n…"
	}
	if strings.TrimSpace(out) == "" {
		return label + "The code ran and printed nothing."
	}
	return fmt.Sprintf("%sThe code ran. Its output:\n\n```\n%s\n```", label, out)
}
