package follow

import (
	"strings"
	"testing"
)

func TestDecodeJob(t *testing.T) {
	const job = `apiVersion: batch/v1
kind: Job
metadata:
  generateName: hello-
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["/bin/sh", "-c", "echo hi"]
`
	cases := map[string]struct {
		file    string
		wantErr string
	}{
		"a Job":                      {file: job},
		"a Job after a comment only": {file: "# my job\n---\n" + job + "---\n"},
		"JSON":                       {file: `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"}}`},
		"empty":                      {file: "# nothing\n", wantErr: "no object in the file: want one batch/v1 Job"},
		"two documents":              {file: job + "---\n" + job, wantErr: "2 objects in the file: want one batch/v1 Job"},
		"a Deployment":               {file: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n", wantErr: "the file holds apps/v1 Deployment: want a batch/v1 Job"},
		"an old Job version":         {file: "apiVersion: batch/v2alpha1\nkind: Job\n", wantErr: "the file holds batch/v2alpha1 Job: want a batch/v1 Job"},
		"no type":                    {file: "metadata:\n  name: x\n", wantErr: "the file holds an object with no apiVersion and kind: want a batch/v1 Job"},
		"not YAML":                   {file: "{{{", wantErr: "not a Kubernetes object"},
		"a typo":                     {file: strings.Replace(job, "command:", "comand:", 1), wantErr: `unknown field "spec.template.spec.containers[0].comand"`},
		"no name":                    {file: "apiVersion: batch/v1\nkind: Job\n", wantErr: "neither metadata.name nor metadata.generateName"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeJob([]byte(tc.file))
			if tc.wantErr == "" {
				if err != nil || got == nil {
					t.Fatalf("DecodeJob: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	got, err := DecodeJob([]byte(job))
	if err != nil {
		t.Fatal(err)
	}
	if got.GenerateName != "hello-" || got.Spec.Template.Spec.Containers[0].Command[2] != "echo hi" {
		t.Errorf("decoded %+v", got)
	}
}
