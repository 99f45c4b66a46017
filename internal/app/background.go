package app

import (
	"math"

	configv1 "github.com/codeinterp/codeinterp/api/codeinterp/config/v1"
	"github.com/codeinterp/codeinterp/pkg/processor"
	"github.com/codeinterp/codeinterp/pkg/store/memory"
	storeredis "github.com/codeinterp/codeinterp/pkg/store/redis"
)

// storedLimits are the bounds of the stored answers' store in memory (config responses).
func storedLimits(cfg *configv1.Config) memory.PendingLimits {
	r := cfg.GetResponses()
	return memory.PendingLimits{
		TTL:                   r.GetStoredTtl().AsDuration(),
		MaxEntries:            int(r.GetMaxStored()),
		MaxBytes:              clampInt(r.GetMaxStoredBytes()),
		MaxEntriesPerIdentity: int(r.GetMaxStoredPerIdentity()),
		MaxBytesPerIdentity:   clampInt(r.GetMaxStoredBytesPerIdentity()),
	}
}

// storedRedisOptions sets the bounds of the stored answers' store in Redis (config responses).
func storedRedisOptions(cfg *configv1.Config, o storeredis.Options) storeredis.Options {
	l := storedLimits(cfg)
	o.PendingTTL = l.TTL
	o.PendingMaxEntries, o.PendingMaxBytes = l.MaxEntries, l.MaxBytes
	o.PendingMaxEntriesPerIdentity, o.PendingMaxBytesPerIdentity = l.MaxEntriesPerIdentity, l.MaxBytesPerIdentity
	return o
}

// backgroundBounds are the bounds of the background responses (config responses).
func backgroundBounds(cfg *configv1.Config) processor.Background {
	r := cfg.GetResponses()
	return processor.Background{MaxPerIdentity: int(r.GetMaxBackgroundPerIdentity()), Max: int(r.GetMaxBackground()),
		Lease: cfg.GetBackgroundLease().AsDuration()}
}

// clampInt is v as an int, at most math.MaxInt.
func clampInt(v uint64) int { return int(min(v, uint64(math.MaxInt))) }
