package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/imagemanager"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/lifecycle"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Image volumes (ImageVolume, GA in v1.36): a pod's volume whose source
// is an OCI image, mounted read-only, its layers overlaid by the runtime
// (pkg/nodeagent/sandbox/view). As the kubelet, the images are pulled by
// the volume's pullPolicy, with the pod's pull secrets, the pull events
// recorded on the pod; a container mounting one that cannot be pulled
// waits with the pull's reason (ErrImagePull, ImagePullBackOff, ...) and
// a FailedToCreateContainer-style "Error:" event, and is tried again. An
// image volume is resolved once per pod, before the container's own image,
// and the store keeps it referenced while the pod's worker lives (the
// kubelet resolves it again at each container start; here a later start,
// a restart, mounts the same image).

// volumeImage is the image of one image volume of the pod.
type volumeImage struct {
	// pull is the pull in flight, if any.
	pull *imagemanager.PullState
	// image is the image held, once resolved.
	image runImage
	// layers are its unpacked layer directories, bottom first; nil
	// until resolved.
	layers []string
}

// imageVolumesFor resolves the image volumes container c mounts and
// returns their layers by volume name; or, when c must wait for one, why.
func (w *worker) imageVolumesFor(ctx context.Context, pod *corev1.Pod, c *container, now time.Time) (map[string][]string, *imageWait) {
	var layers map[string][]string
	for _, vm := range c.spec.VolumeMounts {
		v := podVolume(pod, vm.Name)
		if v == nil || v.Image == nil {
			continue
		}
		if _, ok := w.agent.runtime.(runtime.Isolator); !ok {
			// A runtime that runs nothing mounts nothing.
			continue
		}
		if w.agent.puller == nil {
			return nil, &imageWait{reason: imagemanager.ReasonErrImagePull, message: "image volumes need the image store, which this node could not open (see its log)", retry: now.Add(pullRetryAfterError)}
		}
		if w.volImages == nil {
			w.volImages = map[string]*volumeImage{}
		}
		vi := w.volImages[v.Name]
		if vi == nil {
			vi = &volumeImage{}
			w.volImages[v.Name] = vi
		}
		if vi.layers != nil {
			// Resolved for an earlier container or attempt, and held
			// for the pod's life.
			if layers == nil {
				layers = map[string][]string{}
			}
			layers[v.Name] = vi.layers
			continue
		}
		img, wait := w.resolveImage(ctx, pod, pullTarget{
			requested: v.Image.Reference, policy: v.Image.PullPolicy, pull: &vi.pull, held: &vi.image,
			event:  func(eventType, reason, message string) { w.agent.event(pod, eventType, reason, message) },
			volume: true,
		}, now)
		if wait != nil {
			if wait.reason != lifecycle.ReasonContainerCreating {
				// As the kubelet, on the container that cannot be created.
				w.agent.containerEvent(pod, c.info, corev1.EventTypeWarning, imagemanager.EventFailed, "Error: "+wait.reason)
			}
			c.waitsForVolume = v.Name
			return nil, wait
		}
		if layers == nil {
			layers = map[string][]string{}
		}
		vi.layers = img.Layers
		if vi.layers == nil {
			vi.layers = []string{}
		}
		layers[v.Name] = vi.layers
	}
	return layers, nil
}

// withImageLayers fills the layers of the image volume mounts.
func withImageLayers(mounts []runtime.Mount, layers map[string][]string) []runtime.Mount {
	for i := range mounts {
		if name := mounts[i].ImageVolume; name != "" {
			mounts[i].Layers = layers[name]
		}
	}
	return mounts
}

// releaseVolumeImages gives back the image volumes' store references and
// cancels their pulls in flight.
func (w *worker) releaseVolumeImages() {
	for _, vi := range w.volImages {
		vi.image.release()
		if vi.pull != nil {
			vi.pull.Cancel()
		}
	}
}

// volumePullsDone returns the image volumes whose pull ended (the
// containers waiting for them are then due).
func (w *worker) volumePullsDone() map[string]bool {
	var done map[string]bool
	for name, vi := range w.volImages {
		if vi.pull == nil {
			continue
		}
		select {
		case <-vi.pull.Done:
			if done == nil {
				done = map[string]bool{}
			}
			done[name] = true
		default:
		}
	}
	return done
}

// podVolume returns the pod's volume called name.
func podVolume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// holdAdoptedVolumeImages takes store references on the images of the
// image volumes an adopted container mounts (a previous run of the agent
// started it), so that garbage collection and `image rm` leave the layers
// it has mounted; an image no longer in the store is left out (the next
// start resolves it again).
func (w *worker) holdAdoptedVolumeImages(pod *corev1.Pod, c *container) {
	store := w.agent.puller.Store
	for _, vm := range c.spec.VolumeMounts {
		v := podVolume(pod, vm.Name)
		if v == nil || v.Image == nil || (w.volImages[v.Name] != nil && w.volImages[v.Name].layers != nil) {
			continue
		}
		ref, err := images.Normalize(v.Image.Reference)
		if err != nil {
			continue
		}
		img, err := store.Lookup(ref)
		if err != nil {
			continue
		}
		if w.volImages == nil {
			w.volImages = map[string]*volumeImage{}
		}
		vi := &volumeImage{image: runImage{name: ref, id: imagemanager.ImageIDOf(img, ref), storeID: img.ID, done: store.Use(img.ID)}, layers: img.Layers}
		if vi.layers == nil {
			vi.layers = []string{}
		}
		w.volImages[v.Name] = vi
	}
}
