package fleet_test

import (
	"context"
	"testing"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
)

// BenchmarkAcquireRun measures one request's use of an existing container (acquire by id,
// one run, release) straight on its Manager and through a gateway's Fleet, over the memory
// stores and an in-process owner: the Fleet's own cost of routing, without the network.
func BenchmarkAcquireRun(b *testing.B) {
	c := newCluster(b, 8, 8)
	info, err := c.fleets["b"].Create(context.Background(), sandbox.CreateRequest{Identity: "alice"})
	if err != nil {
		b.Fatalf("create: %v", err)
	}
	for _, bb := range []struct {
		name string
		s    sandbox.Service
	}{
		{"manager", c.managers["b"]},
		{"gateway", c.fleets[""]},
	} {
		b.Run(bb.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				l, err := bb.s.Acquire(ctx, sandbox.AcquireRequest{Identity: "alice", ContainerID: info.ID})
				if err != nil {
					b.Fatalf("acquire: %v", err)
				}
				if _, err := l.Run(ctx, "x=1", 0); err != nil {
					b.Fatalf("run: %v", err)
				}
				l.Release()
			}
		})
	}
}
