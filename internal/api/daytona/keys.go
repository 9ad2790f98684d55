package daytona

// keyScope is the Daytona facade's name in the idempotency claims' scopes
// ("daytona:<pattern>@owner:<owner>"): a key is the caller's, per route and
// per wire, as on the native API.
const keyScope = "daytona"
