package schema_test

import (
	"github.com/codeinterp/codeinterp/pkg/schema"
	"github.com/codeinterp/codeinterp/pkg/schema/chat"
	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"
	shared "github.com/codeinterp/codeinterp/pkg/schema/internal/openai"
	"github.com/codeinterp/codeinterp/pkg/schema/responses"
)

// The tests of this directory run the same tables through OpenAI's two surfaces, which share
// most of their code: Surface picks one, and the functions below call its package.

// Surface names the surface a test case runs on.
type Surface int

const (
	Responses Surface = iota + 1
	Chat
)

func (s Surface) String() string {
	if s == Chat {
		return "chat_completions"
	}
	return "responses"
}

func RewriteRequest(s Surface, body []byte, o schema.Options) (schema.Request, error) {
	if s == Chat {
		return chat.RewriteRequest(body, o)
	}
	return responses.RewriteRequest(body, o)
}

func ParseTurn(s Surface, body []byte, functionName string) (schema.Turn, error) {
	if s == Chat {
		return chat.ParseTurn(body, functionName)
	}
	return responses.ParseTurn(body, functionName)
}

func FollowUp(s Surface, req, resp []byte, outputs []schema.CallOutput, o schema.FollowUpOptions) ([]byte, error) {
	if s == Chat {
		return chat.FollowUp(req, resp, outputs, o)
	}
	return responses.FollowUp(req, resp, outputs, o)
}

// FinalInput is schema.FinalInput with the surface to build the answer of.
type FinalInput struct {
	Surface      Surface
	Rounds       []schema.Round
	FunctionName string
	Tool         []byte
	ToolChoice   []byte
}

func Final(in FinalInput) ([]byte, error) {
	si := schema.FinalInput{Rounds: in.Rounds, FunctionName: in.FunctionName, Tool: in.Tool, ToolChoice: in.ToolChoice}
	if in.Surface == Chat {
		return chat.Final(si)
	}
	return responses.Final(si)
}

func MarkIncomplete(s Surface, body []byte, reason string) ([]byte, error) {
	if s == Chat {
		return chat.MarkIncomplete(body)
	}
	return responses.MarkIncomplete(body, reason)
}

func ErrorSSE(s Surface, code, message string) []byte {
	if s == Chat {
		return chat.ErrorSSE(code, message)
	}
	return responses.ErrorSSE(code, message)
}

var (
	ResponsesSSE       = responses.SSE
	ResponsesFailedSSE = responses.FailedSSE
	ChatSSE            = chat.SSE
	InsertChatCalls    = chat.InsertCalls
	PrependCallOutputs = responses.PrependCallOutputs
	ErrorBody          = shared.ErrorBody
	ServerErrorBody    = shared.ServerErrorBody
	UpstreamErrorBody  = shared.UpstreamErrorBody
	ErrorFields        = shared.ErrorFields

	topKeys          = shared.TopKeys
	requestSpec      = shared.RequestSpec
	requestItemsSpec = jsonscan.Spec{Strict: shared.RequestSpec.Strict, Items: "input", ItemType: "code_interpreter_call"}
)

// FunctionTool is the function tool that stands in for the code_interpreter tool on s.
func FunctionTool(s Surface, name, description string) []byte {
	return (&shared.Dialect{FieldsUnderType: s == Chat}).FunctionTool(name, description)
}
