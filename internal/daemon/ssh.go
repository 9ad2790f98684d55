package daemon

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/sandpit-dev/sandpit/internal/httpguard"
	"github.com/sandpit-dev/sandpit/internal/sshd"
)

// startSSH serves the SSH endpoint when --ssh-listen is set. Its host key
// lives in the data directory, made on the first start, so that clients
// see the same key after every restart. It starts before the HTTP servers
// answer, so that a daemon whose /health answers serves SSH too.
func (d *daemon) startSSH(context.Context) error {
	if d.cfg.SSHListen == "" {
		return nil
	}
	key, err := sshd.LoadHostKey(filepath.Join(d.cfg.DataDir, sshd.HostKeyFile))
	if err != nil {
		return err
	}
	srv, err := sshd.New(sshd.Config{Backend: d.svc, Identity: d.svc.Identity(), HostKey: key, MaxFileBytes: d.cfg.MaxUploadMB << 20, Logger: d.log})
	if err != nil {
		return err
	}
	raw, err := net.Listen("tcp", d.cfg.SSHListen)
	if err != nil {
		return fmt.Errorf("ssh listen %s: %w", d.cfg.SSHListen, err)
	}
	ln := httpguard.LimitListener(raw, "ssh", d.budget.ssh, d.log)
	d.sshd = srv
	d.log.Info("ssh endpoint serving", "addr", ln.Addr().String(), "host_key", filepath.Join(d.cfg.DataDir, sshd.HostKeyFile))
	go func() {
		if err := srv.Serve(ln); err != nil {
			d.log.Error("ssh endpoint stopped", "err", err)
		}
	}()
	return nil
}

// stopSSH ends every SSH connection.
func (d *daemon) stopSSH(context.Context) {
	if d.sshd != nil {
		_ = d.sshd.Close()
	}
}
