package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/codeinterp/codeinterp/pkg/store"
)

// errNoLoad is Run's error for a Local that does not report its load.
var errNoLoad = errors.New("fleet: the local sandbox service reports no load")

// Run announces this node to the fleet until ctx is done: it reports the node (Self, Addr,
// and the Local Manager's containers and capacity) at once and every HeartbeatEvery, each
// report live for HeartbeatsPerTTL heartbeats, then removes the node from the directory
// (Leave) and returns Leave's error. A heartbeat that fails is logged and tried again at the
// next. On a gateway (no Local or no Self) there is nothing to announce: Run returns nil at
// once. Run blocks; call it once.
func (f *Fleet) Run(ctx context.Context) error {
	if f.cfg.Local == nil || f.cfg.Self == "" {
		return nil
	}
	lr, ok := f.cfg.Local.(loadReporter)
	if !ok {
		return errNoLoad
	}
	every := f.cfg.HeartbeatEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		f.heartbeat(ctx, lr, every)
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
			defer cancel()
			if err := f.cfg.Nodes.Leave(lctx, f.cfg.Self); err != nil {
				return fmt.Errorf("leave the fleet: %w", err)
			}
			return nil
		case <-t.C:
		}
	}
}

// heartbeat reports this node once, bounded by one heartbeat.
func (f *Fleet) heartbeat(ctx context.Context, lr loadReporter, every time.Duration) {
	n := store.Node{ID: f.cfg.Self, Addr: f.cfg.Addr}
	n.Containers, n.Capacity = lr.Load()
	hctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	if err := f.cfg.Nodes.Heartbeat(hctx, n, HeartbeatsPerTTL*every); err != nil && ctx.Err() == nil {
		f.log.Warn("heartbeat", zap.String("node", n.ID), zap.Error(err))
	}
}
