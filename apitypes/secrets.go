package apitypes

import "time"

// Secret is an owner's secret as /v1 tells of it: never its value, which
// no answer carries.
type Secret struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	// Version counts the values the secret has held, from 1.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Hosts are the hosts that may receive the secret.
	Hosts []string `json:"hosts"`
}

// CreateSecretRequest is the body of POST /v1/secrets.
type CreateSecretRequest struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// UpdateSecretRequest is the body of PUT /v1/secrets/{name}: the new value,
// and the new metadata unless it is absent.
type UpdateSecretRequest struct {
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// ListSecretsResponse is the body of GET /v1/secrets.
type ListSecretsResponse struct {
	Secrets []Secret `json:"secrets"`
}
