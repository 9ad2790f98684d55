package service

import (
	"time"

	"github.com/sandpit-dev/sandpit/internal/store"
)

// PageTokenAfter is the page token that continues a listing after the row
// (created, id). Every node's store reads it alike, which is what lets a
// cluster merge the nodes' pages of one listing.
func PageTokenAfter(created time.Time, id string) string { return store.PageTokenAfter(created, id) }

// PagePosition reads a page token back into the row it continues after.
func PagePosition(token string) (time.Time, string, error) { return store.PagePosition(token) }
