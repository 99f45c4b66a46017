package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/sandbox"
	"github.com/codeinterp/codeinterp/pkg/store"
)

// Containers returns identity's containers, live and expired ones still remembered, from
// the shared Registry (no node is asked), by CreatedAt then ID ascending, as
// [sandbox.Manager.Containers] does. A container whose owner has left the directory is lost:
// it is marked expired and shown so; one idle past its expiry is shown expired before its
// owner's pruner gets to it. Listing is no activity. It fails with ErrUnavailable when the
// Registry or the directory fails.
func (f *Fleet) Containers(ctx context.Context, identity string) ([]sandbox.ContainerInfo, error) {
	if identity == "" {
		return nil, nil
	}
	regs, err := f.cfg.Registry.List(ctx, identity)
	if err != nil {
		return nil, fmt.Errorf("%w: list containers: %w", sandbox.ErrUnavailable, err)
	}
	now := f.cfg.Now()
	out := make([]sandbox.ContainerInfo, 0, len(regs))
	for _, r := range regs {
		if r.Identity != identity {
			continue
		}
		if !r.Expired && !f.local(r.Owner) {
			_, ok, err := f.liveNode(ctx, r.Owner)
			if err != nil {
				return nil, err
			}
			if !ok {
				if err := f.cfg.Registry.Expire(ctx, r.ID); err != nil {
					f.log.Warn("mark a lost container expired", zap.String("container_id", r.ID), zap.Error(err))
				}
				r.Expired = true
			}
		}
		if !r.Expired && now.Sub(r.LastUsed) >= expiryOf(r) {
			r.Expired = true
		}
		out = append(out, infoOf(r))
	}
	slices.SortFunc(out, func(a, b sandbox.ContainerInfo) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// expiryOf returns r's idle expiry: its own, or the Manager's default.
func expiryOf(r store.Registration) time.Duration {
	if r.ExpiresAfter > 0 {
		return r.ExpiresAfter
	}
	return sandbox.DefaultSessionIdleTTL
}

// infoOf returns what the Containers API shows of the container registered as r, as the
// Manager shows it.
func infoOf(r store.Registration) sandbox.ContainerInfo {
	status := sandbox.StatusRunning
	if r.Expired {
		status = sandbox.StatusExpired
	}
	mem := r.MemoryLimit
	if mem == "" {
		mem = defaultMemoryLimit
	}
	return sandbox.ContainerInfo{
		ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt, LastActiveAt: r.LastUsed,
		ExpiresAfter: expiryOf(r), MemoryLimit: mem, Status: status, AllowedDomains: r.AllowedDomains,
	}
}
