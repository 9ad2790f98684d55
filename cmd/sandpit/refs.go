package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/sandpit-dev/sandpit/client"
)

// resolveSandbox turns what the user typed into a sandbox id, the way docker
// takes a container: the id itself, the sandbox's name, or a prefix of one
// id that no other id shares. An id is tried first, so the common case is
// one request; a name or prefix lists the caller's sandboxes.
func resolveSandbox(ctx context.Context, c *client.Client, ref string) (string, error) {
	sb, err := lookupSandbox(ctx, c, ref)
	return sb.ID, err
}

// lookupSandbox is resolveSandbox returning the sandbox itself, for the
// commands that look at its state before they act.
func lookupSandbox(ctx context.Context, c *client.Client, ref string) (client.Sandbox, error) {
	if ref == "" {
		return client.Sandbox{}, errors.New("a sandbox id or name is required")
	}
	if sb, err := c.Get(ctx, ref); err == nil {
		return sb, nil
	} else if !isNotFound(err) {
		return client.Sandbox{}, err
	}
	var named, prefixed []string
	found := map[string]client.Sandbox{}
	token := ""
	for {
		page, next, err := c.List(ctx, client.ListOptions{Limit: 500, PageToken: token})
		if err != nil {
			return client.Sandbox{}, err
		}
		for _, sb := range page {
			found[sb.ID] = sb
			if sb.Name == ref {
				named = append(named, sb.ID)
			}
			if strings.HasPrefix(sb.ID, ref) {
				prefixed = append(prefixed, sb.ID)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	// A name is unique per owner, so several only for an admin who sees
	// every owner's; an exact name wins over a prefix, as in docker.
	for _, ids := range [][]string{named, prefixed} {
		switch len(ids) {
		case 0:
			continue
		case 1:
			return found[ids[0]], nil
		default:
			sort.Strings(ids)
			return client.Sandbox{}, fmt.Errorf("%q is ambiguous: it matches sandboxes %s; use the whole id", ref, strings.Join(ids, ", "))
		}
	}
	return client.Sandbox{}, fmt.Errorf("no such sandbox: %q (no id, name or id prefix matches)", ref)
}

// resolveArg replaces args[i] with the sandbox id it names, and notes what
// the user typed for it (see typedRefs).
func resolveArg(ctx context.Context, c *client.Client, args []string, i int) error {
	id, err := resolveSandbox(ctx, c, args[i])
	if err != nil {
		return err
	}
	if typed, ok := ctx.Value(typedRefsKey{}).(typedRefs); ok {
		typed[id] = args[i]
	}
	args[i] = id
	return nil
}

// typedRefs maps a resolved sandbox id to what the user typed for it, so
// that an error about the sandbox can name it the user's way. main puts one
// in the commands' context.
type typedRefs map[string]string

type typedRefsKey struct{}

func isNotFound(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == http.StatusNotFound
}
