package policy

// pathState is what pathInSchema found.
type pathState int

const (
	// pathFound: the path resolves.
	pathFound pathState = iota
	// pathMissing: a segment does not exist.
	pathMissing
	// pathIntoList: the path reaches an array before its end, or ends on
	// one.
	pathIntoList
)

// pathInSchema resolves a field path in an OpenAPI v3 schema (unstructured
// content). A node that preserves unknown fields resolves everything below
// it.
func pathInSchema(s map[string]interface{}, path []string) pathState {
	for _, seg := range path {
		if t, _ := s["type"].(string); t == "array" {
			return pathIntoList
		}
		if preserve, _ := s["x-kubernetes-preserve-unknown-fields"].(bool); preserve {
			if props, _ := s["properties"].(map[string]interface{}); props[seg] == nil {
				return pathFound
			}
		}
		props, _ := s["properties"].(map[string]interface{})
		if next, ok := props[seg].(map[string]interface{}); ok {
			s = next
			continue
		}
		if next, ok := s["additionalProperties"].(map[string]interface{}); ok {
			s = next
			continue
		}
		return pathMissing
	}
	if t, _ := s["type"].(string); t == "array" {
		return pathIntoList
	}
	return pathFound
}
