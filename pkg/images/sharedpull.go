package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
)

// pullGroup shares a pull among the concurrent callers that want the same
// thing (one reference, platform and set of credentials), and cancels it
// when none of them waits for it any more.
type pullGroup struct {
	// mu guards flights and each flight's waiters.
	mu sync.Mutex
	// flights are the pulls in progress by key.
	flights map[string]*flight
}

// pulled is the result of one pull: the image, and the index of the
// credential the registry took among those tried (the same list, by
// content, for every caller sharing the pull).
type pulled struct {
	img  *Image
	auth int
}

// flight is one shared pull.
type flight struct {
	// done is closed once res and err are set.
	done chan struct{}
	// res and err are the pull's result.
	res pulled
	err error
	// waiters counts the callers waiting for the pull.
	waiters int
	// cancel ends the pull's context.
	cancel context.CancelFunc
}

// do returns the result of fn for key, starting fn unless a call for key
// is in progress, in which case the caller waits for that one. fn's
// context keeps ctx's values but not its cancellation: it is cancelled
// when the last caller waiting for it leaves, and the key is then free
// for a new pull. A caller whose ctx ends first gets ctx.Err() at once.
func (g *pullGroup) do(ctx context.Context, key string, fn func(context.Context) (pulled, error)) (pulled, error) {
	g.mu.Lock()
	f, ok := g.flights[key]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		if g.flights == nil {
			g.flights = map[string]*flight{}
		}
		g.flights[key] = f
		go func() {
			res, err := fn(fctx)
			g.mu.Lock()
			f.res, f.err = res, err
			if g.flights[key] == f {
				delete(g.flights, key)
			}
			g.mu.Unlock()
			cancel()
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if g.flights[key] == f {
				delete(g.flights, key)
			}
		}
		g.mu.Unlock()
		return pulled{}, ctx.Err()
	}
}

// credentialsKey is a digest of what auths send, in order: pulls with
// other credentials are not shared, so that one with valid credentials
// never takes the refusal of one without, nor the reverse.
func credentialsKey(auths []authn.Authenticator) (string, error) {
	h := sha256.New()
	for _, a := range auths {
		cfg, err := a.Authorization()
		if err != nil {
			return "", err
		}
		data, err := json.Marshal(cfg)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%d:%s\n", len(data), data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
