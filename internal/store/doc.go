// Package store is the only writer of Sandpit's SQLite database: the
// sandboxes, their ports, previews and custom domains, the API tokens and
// owners' limits with the audit log, the warm pool, templates and their
// builds and tags, volumes, SSH keys and tokens, and the idempotency
// claims, in one file in the data directory
// that the Store holds an exclusive lock on while it is open. Its schema is
// brought up to date by the numbered migrations in migrations/*.sql, which
// are embedded in the binary.
//
// The store sits at the bottom of the daemon: it may import only the
// domain types (the module's root package) and internal/crashpoint, never
// the service, the idempotency engine or the HTTP surfaces that use it.
package store
