package store

import "errors"

// ErrDataDirLocked is the store's own failure: another process holds the data
// directory. The domain's sentinel errors live in package sandpit.
var ErrDataDirLocked = errors.New("data directory is locked by another sandpit process")
