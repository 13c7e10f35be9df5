package images

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// GCPolicy says when CollectGarbage removes images: as the kubelet's image
// garbage collection (whose defaults are 85, 80 and 2 minutes).
type GCPolicy struct {
	// HighPercent is the disk usage of the store's file system at or
	// above which images are removed; 100 disables collection.
	HighPercent int
	// LowPercent is the usage collection brings the file system under.
	LowPercent int
	// MinAge is how long an image must have gone unused before it may be
	// removed.
	MinAge time.Duration
}

// DefaultGCPolicy is the kubelet's default image GC policy.
var DefaultGCPolicy = GCPolicy{HighPercent: 85, LowPercent: 80, MinAge: 2 * time.Minute}

// CollectGarbage deletes the unpacked layers no image names that were
// stored over orphanMinAge ago (what a pull killed before it recorded its
// image leaves), then removes unused images when the store's file system
// is at or above p.HighPercent full: images no container uses (Use) and
// not used for p.MinAge, least recently used first, until usage is below
// p.LowPercent or no candidate is left. It returns the IDs removed.
func (s *Store) CollectGarbage(ctx context.Context, p GCPolicy) (removed []string, err error) {
	if p.HighPercent < 100 && (p.LowPercent >= p.HighPercent || p.LowPercent < 0) {
		return nil, fmt.Errorf("image GC: low threshold %d%% must be below the high one, %d%%", p.LowPercent, p.HighPercent)
	}
	if _, err := s.sweepLayers(nil, orphanMinAge); err != nil {
		return nil, fmt.Errorf("image GC: %w", err)
	}
	if p.HighPercent >= 100 {
		return nil, nil
	}
	used, capacity, err := s.diskUsage(s.dir)
	if err != nil {
		return nil, fmt.Errorf("image GC: measuring disk usage: %w", err)
	}
	if capacity <= 0 || used*100 < int64(p.HighPercent)*capacity {
		return nil, nil
	}
	images, err := s.List()
	if err != nil {
		return nil, err
	}
	cutoff := s.now().Add(-p.MinAge)
	var candidates []*Image
	for _, img := range images {
		if img.LastUsed.After(cutoff) {
			continue
		}
		candidates = append(candidates, img)
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].LastUsed.Before(candidates[j].LastUsed) })
	for _, img := range candidates {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if err := s.Remove(img.ID); err != nil {
			if errors.Is(err, ErrInUse) || errors.Is(err, ErrNotFound) {
				continue
			}
			return removed, err
		}
		removed = append(removed, img.ID)
		used, capacity, err = s.diskUsage(s.dir)
		if err != nil {
			return removed, fmt.Errorf("image GC: measuring disk usage: %w", err)
		}
		if used*100 < int64(p.LowPercent)*capacity {
			break
		}
	}
	return removed, nil
}

// statfsUsage reports the bytes used (capacity less what an unprivileged
// user may still write, as the kubelet counts) and the capacity of the
// file system holding dir.
func statfsUsage(dir string) (used, capacity int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	capacity = int64(st.Blocks) * st.Bsize
	return capacity - int64(st.Bavail)*st.Bsize, capacity, nil
}
