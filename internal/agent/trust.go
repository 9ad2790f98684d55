package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sandpit-dev/sandpit/internal/agentapi"
)

// caBundles are where images keep their trust store: Debian, Ubuntu and
// Alpine; Fedora and RHEL; openSUSE; and the OpenSSL default some images
// use on its own.
var caBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// localCADir is where update-ca-certificates reads local CAs from, so that
// a sandbox that runs it keeps trusting the daemon's CA.
const localCADir = "/usr/local/share/ca-certificates"

// trustDaemonCA makes the sandbox trust the daemon's egress CA, when the
// daemon mounted one: it is added to each trust store the image has (or
// to a new one where it has none), and the variables programs read a trust
// store from (OpenSSL's, Python requests', Node's) are set in env unless
// the sandbox's own environment sets them. It runs at every start and adds
// the certificate only where it is not yet, so a restarted or snapshotted
// sandbox keeps one copy. A failure is logged and the agent serves on: the
// sandbox then fails only the connections a rule intercepts.
func trustDaemonCA(env map[string]string, log *slog.Logger) {
	ca, err := os.ReadFile(agentapi.CAPath)
	if err != nil || len(bytes.TrimSpace(ca)) == 0 {
		return
	}
	ca = append(bytes.TrimSpace(ca), '\n')
	bundle := ""
	for _, p := range caBundles {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := appendOnce(p, ca); err != nil {
			log.Warn("agent: cannot add the daemon's CA to a trust store", "path", p, "err", err)
			continue
		}
		if bundle == "" {
			bundle = p
		}
	}
	if bundle == "" {
		bundle = caBundles[0]
		if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err == nil {
			err = os.WriteFile(bundle, ca, 0o644)
		}
		if err != nil {
			log.Warn("agent: cannot write a trust store for the daemon's CA", "path", bundle, "err", err)
			return
		}
	}
	if fi, err := os.Stat(localCADir); err == nil && fi.IsDir() {
		_ = os.WriteFile(filepath.Join(localCADir, "sandpit-egress-ca.crt"), ca, 0o644)
	}
	for k, v := range map[string]string{"SSL_CERT_FILE": bundle, "REQUESTS_CA_BUNDLE": bundle, "NODE_EXTRA_CA_CERTS": agentapi.CAPath} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
}

// appendOnce adds cert to the bundle at p unless it holds it already.
func appendOnce(p string, cert []byte) error {
	have, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if bytes.Contains(have, bytes.TrimSpace(cert)) {
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if len(have) > 0 && have[len(have)-1] != '\n' {
		cert = append([]byte{'\n'}, cert...)
	}
	if _, err := f.Write(cert); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
