package e2b

// keyScope is the E2B facade's name in the idempotency claims' scopes of its
// keyed routes other than the create ("e2b:<pattern>@owner:<owner>"); the
// create keeps its own scope (Scope), shared by its keyed and fingerprinted
// requests.
const keyScope = "e2b"
