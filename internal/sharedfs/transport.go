package sharedfs

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Transport is how a client's I/O reaches the servers, as far as the
// client shows it.
type Transport string

// The transports.
const (
	// TransportTLS: every connection of the client's I/O path is TLS.
	TransportTLS Transport = "tls"
	// TransportClear: at least one is not.
	TransportClear Transport = "clear"
	// TransportUnknown: the client shows nothing filevol can read about
	// it (every kind but GlusterFS, or a .meta that could not be read).
	TransportUnknown Transport = ""
)

// RequireTLS is the value of --shared-pool-require that refuses a pool
// whose client does not show TLS on its I/O path.
const RequireTLS = "tls"

// What a GlusterFS client shows of TLS (GlusterFS 10.3): each client
// translator (type protocol/client, one per brick) of
// .meta/graphs/active/volfile carries "option transport.socket.ssl-enabled
// on" when the volume has client.ssl on, with the certificate files it
// reads (transport.socket.ssl-own-cert, -private-key, -ca-list; absent:
// /etc/ssl/glusterfs.{pem,key,ca}). A client built with it connects to the
// brick in TLS or not at all. It does not show: whether the server
// demands TLS of the other clients (server.ssl), which names it lets in
// (auth.ssl-allow), whether the certificate is valid or whose it is, and
// whether the management connection that fetched the volfile was TLS (a
// file, /var/lib/glusterd/secure-access, on the node's host).
const glusterSSLOption = "transport.socket.ssl-enabled"

// glusterTransport reads the client translators' TLS option from the
// volfile in fsys (the volume's root as mounted at mnt); from says where,
// or why it could not be read.
func glusterTransport(fsys fs.FS, mnt string) (t Transport, from string) {
	where := path.Join(mnt, metaVolfile)
	if fsys == nil {
		return TransportUnknown, where + " not reachable"
	}
	graph, err := readVolfile(fsys)
	if err != nil {
		return TransportUnknown, err.Error()
	}
	var clear, tls []string
	for _, x := range graph {
		if x.typ != "protocol/client" {
			continue
		}
		if glusterBool(x.options[glusterSSLOption]) {
			tls = append(tls, x.name)
		} else {
			clear = append(clear, x.name)
		}
	}
	switch {
	case len(clear) > 0:
		return TransportClear, fmt.Sprintf("%s off in %s (%s)", glusterSSLOption, strings.Join(clear, ", "), where)
	case len(tls) == 0:
		return TransportUnknown, fmt.Sprintf("%s holds no client translator (type protocol/client)", where)
	}
	return TransportTLS, fmt.Sprintf("%s on in %s (%s)", glusterSSLOption, strings.Join(tls, ", "), where)
}

// TLSUnmet is nil when r's client shows TLS on its I/O path, else what
// --shared-pool-require=tls misses, with the fix.
func TLSUnmet(r Report) *Unmet {
	if r.Transport == TransportTLS {
		return nil
	}
	u := &Unmet{Setting: RequireTLS, Want: "TLS on every connection of the client's I/O path", Found: r.TransportFrom,
		Why: "without it a volume's blocks cross the network in clear"}
	switch r.Kind {
	case KindGlusterFS:
		vol := r.Volume
		if vol == "" {
			vol = "VOLUME"
		}
		if u.Found == "" {
			u.Found = "unknown"
		}
		u.Fix = fmt.Sprintf("put a CA and a certificate and key per peer on the server and every node (/etc/ssl/glusterfs.{ca,pem,key}, "+
			"or gluster volume set %[1]s ssl.own-cert/ssl.private-key/ssl.ca-list), gluster volume set %[1]s auth.ssl-allow <peer names>, "+
			"gluster volume set %[1]s client.ssl on, gluster volume set %[1]s server.ssl on, restart the volume and remount it on every node "+
			"(docs/shared-pools-glusterfs.md, In transit)", vol)
	default:
		u.Found = fmt.Sprintf("a %s filesystem, whose client shows filevol nothing of its transport", r.Kind)
		u.Fix = "serve the pool from a GlusterFS volume with client.ssl and server.ssl on, or drop --shared-pool-require=tls " +
			"and secure the network by other means (filevol checks TLS on GlusterFS clients only)"
	}
	return u
}
