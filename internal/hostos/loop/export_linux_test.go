package loop

var (
	ConfigureFallback = configureFallback
	EnsureNode        = ensureNode
)
