package volview

import "strings"

// Within reports whether the clean path p is root or below it.
func Within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}
