package imagemanager

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/atomicfile"
)

// Pulled-image records, as the kubelet keeps them with
// KubeletEnsureSecretPulledImages (beta and on since Kubernetes 1.35), its
// default policy NeverVerifyPreloadedImages: an image the agent pulled may
// be used without pulling again only by a pod that could pull it, that is
// one whose pull secrets hold the credential that pulled it (the same
// secret, or another holding the same credential), or any pod when it was
// pulled without credentials or with the node's own. An image the agent
// never pulled (loaded from a file, `jobkeeper image load`) may be used by
// any pod.
//
// On disk, as the kubelet's, under <data dir>/image_manager: pulling/ holds
// an intent per image being pulled (written before the pull, removed once
// its record is written), pulled/ a record per image ID naming, per image
// name, the credentials that pulled it; files are named
// sha256-<hex digest of the key>, JSON of the kubelet's own types
// (kubelet.config.k8s.io/v1beta1 ImagePullIntent, ImagePulledRecord),
// written to a temporary file and renamed. An intent left by an agent that
// stopped mid-pull makes its image count as pulled by the agent; if the
// image is in the store, it becomes a record with no credentials, so the
// next pod that wants it must prove it can pull it.

// maxRecordedSecrets bounds the secrets a record keeps per image name, as
// the kubelet's.
const maxRecordedSecrets = 100

// PullRecords are the pulled-image records. Safe for concurrent use.
type PullRecords struct {
	// dir is <data dir>/image_manager.
	dir string
	// now stamps records.
	now func() time.Time

	// mu guards intents, denied and the files.
	mu sync.Mutex
	// intents counts the pulls in flight per image.
	intents map[string]int
	// denied are the image IDs whose record could not be written after a
	// pull: no pod uses them without pulling until one is.
	denied map[string]bool
}

// PullCredential is who pulled an image: a pull secret's credential, or
// nil for none or the node's own (any pod may then use the image).
type PullCredential = *images.SecretCredential

// OpenPullRecords opens the records under dir, creating it.
func OpenPullRecords(dir string, now func() time.Time) (*PullRecords, error) {
	for _, d := range []string{"pulling", "pulled"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return &PullRecords{dir: dir, now: now, intents: map[string]int{}, denied: map[string]bool{}}, nil
}

// fileName is the file of key in sub.
func (r *PullRecords) fileName(sub, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(r.dir, sub, "sha256-"+hex.EncodeToString(sum[:]))
}

// Intend records that image is about to be pulled; the returned function
// ends the intent (after Record, or when the pull failed).
func (r *PullRecords) Intend(image string) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.intents[image] == 0 {
		intent := kubeletv1beta1.ImagePullIntent{TypeMeta: typeMeta("ImagePullIntent"), Image: image}
		if err := atomicfile.WriteJSON(r.fileName("pulling", image), intent); err != nil {
			return nil, err
		}
	}
	r.intents[image]++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.intents[image]--; r.intents[image] <= 0 {
				delete(r.intents, image)
				_ = os.Remove(r.fileName("pulling", image))
			}
		})
	}, nil
}

// Record adds to imageRef's record that cred pulled image (nil: without
// credentials, or with the node's). A record that cannot be read (cut
// short by a crash) is written anew. When the record cannot be written,
// the image is denied to every pod that does not pull it, until a record
// is written.
func (r *PullRecords) Record(image, imageRef string, cred PullCredential) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if err != nil {
			r.denied[imageRef] = true
		} else {
			delete(r.denied, imageRef)
		}
	}()
	rec, err := r.read(imageRef)
	if err != nil {
		rec = nil
	}
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{TypeMeta: typeMeta("ImagePulledRecord"), ImageRef: imageRef}
	}
	if rec.CredentialMapping == nil {
		rec.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
	}
	name := imageName(image)
	creds := rec.CredentialMapping[name]
	switch {
	case creds.NodePodsAccessible:
	case cred == nil:
		creds = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	default:
		creds.KubernetesSecrets = addSecret(creds.KubernetesSecrets, cred)
	}
	rec.CredentialMapping[name] = creds
	rec.LastUpdatedTime = metav1.NewTime(r.now())
	return atomicfile.WriteJSON(r.fileName("pulled", imageRef), rec)
}

// addSecret adds cred's secret to secrets, replacing the hash of the same
// secret (rotated), keeping at most maxRecordedSecrets.
func addSecret(secrets []kubeletv1beta1.ImagePullSecret, cred PullCredential) []kubeletv1beta1.ImagePullSecret {
	s := kubeletv1beta1.ImagePullSecret{UID: string(cred.Secret.UID), Namespace: cred.Secret.Namespace, Name: cred.Secret.Name, CredentialHash: cred.Hash}
	for i := range secrets {
		if secrets[i].UID == s.UID && secrets[i].Namespace == s.Namespace && secrets[i].Name == s.Name {
			secrets[i].CredentialHash = s.CredentialHash
			return secrets
		}
	}
	if len(secrets) >= maxRecordedSecrets {
		secrets = secrets[1:]
	}
	return append(slices.Clone(secrets), s)
}

// MayUse decides whether a pod whose pull secrets hold creds() (those that
// apply to image's registry; asked only when needed) may use imageRef,
// present in the store, for image without pulling it: yes for an image the agent never pulled, or
// pulled without credentials; else only if one of creds matches a
// credential that pulled it, by secret or by content. A match through
// another secret is recorded, as the kubelet's. A record that cannot be
// read means no (the pod pulls).
func (r *PullRecords) MayUse(image, imageRef string, creds func() []PullCredential) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.denied[imageRef] {
		return false
	}
	rec, err := r.read(imageRef)
	if errors.Is(err, fs.ErrNotExist) {
		// Never pulled here, unless a pull of it is under way or was
		// cut short: then it must be proven.
		if r.intents[image] > 0 {
			return false
		}
		_, statErr := os.Stat(r.fileName("pulling", image))
		return errors.Is(statErr, fs.ErrNotExist)
	}
	if err != nil {
		return false
	}
	known, ok := rec.CredentialMapping[imageName(image)]
	if !ok {
		return false
	}
	if known.NodePodsAccessible {
		return true
	}
	for _, c := range creds() {
		for _, s := range known.KubernetesSecrets {
			sameSecret := s.UID == string(c.Secret.UID) && s.Namespace == c.Secret.Namespace && s.Name == c.Secret.Name
			if sameSecret || (s.CredentialHash != "" && s.CredentialHash == c.Hash) {
				if !sameSecret {
					known.KubernetesSecrets = addSecret(known.KubernetesSecrets, c)
					rec.CredentialMapping[imageName(image)] = known
					rec.LastUpdatedTime = metav1.NewTime(r.now())
					_ = atomicfile.WriteJSON(r.fileName("pulled", imageRef), rec)
				}
				return true
			}
		}
	}
	return false
}

// Recover turns the intents an agent left (it stopped mid-pull) into
// records without credentials for the images the store has (refOf
// returns an image's ID, ok false when absent); the others stay.
func (r *PullRecords) Recover(refOf func(image string) (string, bool)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(r.dir, "pulling"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "sha256-") {
			continue
		}
		path := filepath.Join(r.dir, "pulling", e.Name())
		var intent kubeletv1beta1.ImagePullIntent
		if err := readJSON(path, &intent); err != nil {
			continue
		}
		imageRef, ok := refOf(intent.Image)
		if !ok {
			continue
		}
		if _, err := r.read(imageRef); errors.Is(err, fs.ErrNotExist) {
			rec := kubeletv1beta1.ImagePulledRecord{TypeMeta: typeMeta("ImagePulledRecord"), ImageRef: imageRef, LastUpdatedTime: metav1.NewTime(r.now())}
			if err := atomicfile.WriteJSON(r.fileName("pulled", imageRef), rec); err != nil {
				return err
			}
		}
		_ = os.Remove(path)
	}
	return nil
}

// Prune removes the records of images the store no longer has (present
// reports whether it has an image ID) and not updated since before.
func (r *PullRecords) Prune(present func(imageRef string) bool, before time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(r.dir, "pulled"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "sha256-") {
			continue
		}
		path := filepath.Join(r.dir, "pulled", e.Name())
		var rec kubeletv1beta1.ImagePulledRecord
		if err := readJSON(path, &rec); err != nil {
			continue
		}
		if !present(rec.ImageRef) && rec.LastUpdatedTime.Time.Before(before) {
			_ = os.Remove(path)
		}
	}
	return nil
}

// read returns imageRef's record; fs.ErrNotExist when there is none.
func (r *PullRecords) read(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	var rec kubeletv1beta1.ImagePulledRecord
	if err := readJSON(r.fileName("pulled", imageRef), &rec); err != nil {
		return nil, err
	}
	if rec.ImageRef != imageRef {
		return nil, fmt.Errorf("pulled-image record of %s names %s", imageRef, rec.ImageRef)
	}
	return &rec, nil
}

// imageName is an image as a pod names it, without its tag or digest: the
// key of a record's credential mapping, as the kubelet's (not normalized).
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// typeMeta is the kubelet's type meta of kind.
func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: kind}
}

// readJSON reads path into v.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
