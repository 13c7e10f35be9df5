package images

import (
	"context"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"jobkeeper.dev/jobkeeper/internal/testimages"
)

// benchLayers and benchLayerBytes make the image the pull benchmarks pull:
// 4 layers of 25 MB of random (incompressible) data, 100 MB in all.
const (
	benchLayers     = 4
	benchLayerBytes = 25_000_000
)

// benchImage is the benchmarks' image in an in-process registry on
// loopback, built once per test binary (the registry lives as long).
var benchImage struct {
	once sync.Once
	// ref is the image's reference.
	ref string
	// size is the bytes of its layers' files.
	size int64
}

// benchRef returns the reference of the benchmarks' image and its size.
func benchRef(b *testing.B) (string, int64) {
	b.Helper()
	benchImage.once.Do(func() {
		var layers []v1.Layer
		for i := range benchLayers {
			layers = append(layers, randomLayer(b, uint64(100+i), benchLayerBytes))
		}
		img, err := testimages.Build(testimages.Config{}, layers...)
		if err != nil {
			b.Fatal(err)
		}
		ref, err := testimages.NewRegistry().Push("bench/big:1", img)
		if err != nil {
			b.Fatal(err)
		}
		benchImage.ref, benchImage.size = ref, benchLayers*benchLayerBytes
	})
	if benchImage.ref == "" {
		b.Fatal("building the benchmark image failed")
	}
	return benchImage.ref, benchImage.size
}

// BenchmarkPullCold pulls a 100 MB image from a registry on loopback into
// an empty store: fetch, gunzip, digest checks, unpack, fsyncs and index
// write. MB/s counts the image's uncompressed bytes.
func BenchmarkPullCold(b *testing.B) {
	ref, size := benchRef(b)
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Pull(ctx, ref, PullOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		removeAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pull")
}

// BenchmarkPullWarm is what imagePullPolicy IfNotPresent costs for an
// image the store holds: a Lookup, no registry request.
func BenchmarkPullWarm(b *testing.B) {
	s := benchStoreWithImage(b)
	ref, _ := benchRef(b)
	b.ResetTimer()
	for range b.N {
		if _, err := s.Lookup(ref); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPullAlways is what imagePullPolicy Always costs for an image
// the store holds: one manifest request, and the index rewritten with the
// names.
func BenchmarkPullAlways(b *testing.B) {
	s := benchStoreWithImage(b)
	ref, _ := benchRef(b)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.Pull(ctx, ref, PullOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStoreWithImage is a store that holds the benchmarks' image.
func benchStoreWithImage(b *testing.B) *Store {
	b.Helper()
	ref, _ := benchRef(b)
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Pull(context.Background(), ref, PullOptions{}); err != nil {
		b.Fatal(err)
	}
	return s
}
