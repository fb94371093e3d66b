// chartdoc generates a Helm chart's values.schema.json and README.md from the comments of its
// values.yaml (make generate), so that neither is maintained by hand.
module github.com/linkerd/trust-rotation/test/tools/chartdoc

go 1.26.0

require go.yaml.in/yaml/v3 v3.0.5
