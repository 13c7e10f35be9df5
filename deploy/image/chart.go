package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to the module root.
const chartDir = "deploy/helm/jobkeeper"

// chartImage is what the chart installs by default: values.yaml's
// image.repository, tagged with Chart.yaml's appVersion (the chart's
// default for an empty image.tag).
type chartImage struct {
	// Repository is image.repository.
	Repository string
	// AppVersion is Chart.yaml's appVersion.
	AppVersion string
	// Home is Chart.yaml's home, the project's address.
	Home string
}

// Ref is the image reference the chart installs by default.
func (c chartImage) Ref() string { return c.Repository + ":" + c.AppVersion }

// readChartImage reads the chart's default image from the chart under root.
func readChartImage(root string) (chartImage, error) {
	var chart struct {
		AppVersion string `json:"appVersion"`
		Home       string `json:"home"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		path := filepath.Join(root, chartDir, file)
		data, err := os.ReadFile(path)
		if err != nil {
			return chartImage{}, fmt.Errorf("reading the chart's default image: %w", err)
		}
		if err := yaml.Unmarshal(data, into); err != nil {
			return chartImage{}, fmt.Errorf("reading the chart's default image from %s: %w", path, err)
		}
	}
	if chart.AppVersion == "" || values.Image.Repository == "" {
		return chartImage{}, fmt.Errorf("the chart under %s names no default image (appVersion %q, image.repository %q)", filepath.Join(root, chartDir), chart.AppVersion, values.Image.Repository)
	}
	if values.Image.Tag != "" {
		return chartImage{}, fmt.Errorf("the chart's image.tag is %q: this builder names the image by appVersion, which an empty image.tag means", values.Image.Tag)
	}
	return chartImage{Repository: values.Image.Repository, AppVersion: chart.AppVersion, Home: chart.Home}, nil
}
