// Package kubectlplugin is `kubectl filevol`: it reads the cluster through
// client-go (standard kubeconfig handling) and, through the driver's
// read-only /debug/volumes endpoint, what the driver sees on each node,
// and explains filevol volumes to a person — a table of every volume
// (volumes), the whole chain behind one claim (describe) and every problem
// it can name with its cause and fix (doctor).
//
// Checks are pure functions over a snapshot of the cluster (cluster), so
// tests build the snapshot from client-go's fake clientset. It imports
// internal/nodeview/api for the wire types and nothing else of the driver:
// the plugin runs on a user's machine, not on a node.
package kubectlplugin
