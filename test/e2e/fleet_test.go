package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// fleetScenarios are the conversations that must not notice which replica each of their
// requests reaches: the fleet's front sends every request to the next gateway, so a
// conversation's requests land on different replicas, and its containers (on the sandbox
// nodes) and continuations (in Redis) must follow it.
var fleetScenarios = []loopScenario{
	{name: "compute 40+2 (responses)", run: scenarioComputeResponses},
	{name: "compute 40+2 (chat)", run: scenarioComputeChat},
	{name: "a session by metadata.session_id and by container id", run: scenarioSessionResponses},
	{name: "a session (chat)", run: scenarioSessionChat},
	{name: "a session by the profile's session header", run: scenarioSessionHeader},
	{name: "two API keys with the same session_id are isolated", run: scenarioIsolation},
	{name: "a second request names the first answer's container", run: scenarioContainerByID},
	{name: "a continuation reuses the container of the answer it continues", run: scenarioContainerFromPrevious},
	{name: "item references to the code calls resolve", run: scenarioItemReference},
	{name: "the files the code wrote are cited", run: scenarioFilesCited},
	{name: "a mixed client and internal call, then the client's replay", run: scenarioMixedReplay},
	{name: "a mixed client and internal call, then a continuation by previous_response_id", run: scenarioMixedContinue},
	{name: "a mixed client and internal call (chat)", run: scenarioMixedChat},
	{name: "the sandbox killed mid-run", run: scenarioSandboxKilled},
	{name: "skills uploaded through one gateway, mounted and announced through others", run: scenarioSkillsMounted},
	{name: "programmatic tool calling: a pause resumed through another gateway", run: scenarioPTC},
}

// TestFleet runs conversations through 3 gateway replicas, each behind its own real Envoy, and
// 2 sandbox nodes sharing one real Redis (issue 25): each request of a conversation goes to
// the next gateway, plain and streamed.
func TestFleet(t *testing.T) {
	testFleet(t, FleetOptions{})
}

// TestFleetReplicas runs the same conversations through 3 replicas of role all sharing one
// Redis: each runs the containers it started, and the others reach them through its sandbox
// service.
func TestFleetReplicas(t *testing.T) {
	testFleet(t, FleetOptions{Replicas: true})
}

func testFleet(t *testing.T, o FleetOptions) {
	f := NewFleet(t, o)
	s := f.Stack()
	m := newModel(t, s.Model)
	for _, sc := range fleetScenarios {
		for _, v := range variants {
			t.Run(sc.name+"/"+v.String(), func(t *testing.T) {
				m.clear()
				x := &scene{s: s, m: m, v: v, mark: len(m.Requests())}
				sc.run(t, x)
				assert.Zero(t, m.pending(), "%s (%s): every scripted answer was used", sc.name, v)
			})
		}
	}
	// Messages: a conversation continued in its container, and a bash session carried over,
	// each request on another gateway.
	t.Run("messages continued in its container", func(t *testing.T) { testMessagesToolsContinued(t, s) })
	t.Run("messages bash session", func(t *testing.T) { testMessagesBashSession(t, s) })
	// The Skills API: each call on another gateway, the skills and bundles in Redis.
	t.Run("skills API", func(t *testing.T) { testSkillsLifecycle(t, s) })
	for i, n := range f.Served() {
		assert.NotZero(t, n, "gateway %d served requests", i)
	}
	if !o.Replicas {
		t.Run("redis commands of one conversation", func(t *testing.T) { testRedisCommands(t, f, s) })
	}
}
