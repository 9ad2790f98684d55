//go:build !sandpit_crashpoints

package crashpoint

// Enabled reports whether this binary has crash points.
const Enabled = false

// Hit does nothing: this binary was built without crash points.
func Hit(string) {}
