package follow

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// DecodeJob reads the one batch/v1 Job of a YAML or JSON manifest, as
// `run -f` takes it. It refuses anything else with an error saying what it
// found: another kind or API version, several documents, or fields a Job
// does not have (so a typo is not silently dropped before the Job is sent).
func DecodeJob(data []byte) (*batchv1.Job, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("not a YAML or JSON manifest: %w", err)
	}
	switch {
	case len(docs) == 0:
		return nil, fmt.Errorf("no object in the file: want one batch/v1 Job")
	case len(docs) > 1:
		return nil, fmt.Errorf("%d objects in the file: want one batch/v1 Job", len(docs))
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(docs[0], &tm); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.APIVersion != "batch/v1" || tm.Kind != "Job" {
		what := strings.TrimSpace(tm.APIVersion + " " + tm.Kind)
		if what == "" {
			what = "an object with no apiVersion and kind"
		}
		return nil, fmt.Errorf("the file holds %s: want a batch/v1 Job", what)
	}
	job := &batchv1.Job{}
	if _, _, err := strictSerializer.Decode(docs[0], nil, job); err != nil {
		return nil, fmt.Errorf("reading the Job: %w", err)
	}
	if job.Name == "" && job.GenerateName == "" {
		return nil, fmt.Errorf("the Job has neither metadata.name nor metadata.generateName")
	}
	return job, nil
}

// strictSerializer decodes YAML or JSON into client-go's types and refuses
// unknown and duplicate fields, naming their path.
var strictSerializer = k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	k8sjson.SerializerOptions{Yaml: true, Strict: true})

// splitDocuments splits a YAML stream into its documents (JSON is one
// document) and drops those that are empty or only comments.
func splitDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil || v != nil {
			// Not empty: a syntax error is reported by the decoder, with
			// its line.
			docs = append(docs, doc)
		}
	}
}
