package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/haproxytech/client-native/v6/models"

	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/failure"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/model"
	"github.com/haproxy-k8s-sync/haproxy-k8s-sync/sync/plan"
)

// transaction writes the structural changes in one transaction and commits it.
func (c *Client) transaction(ctx context.Context, version int64, p plan.Plan, changes []plan.Change, serverPath func(string) string) (out plan.Applied, err error) {
	if err := c.sweepTransactions(ctx, version); err != nil {
		return out, err
	}
	var tx models.Transaction
	if _, err := c.do(ctx, http.MethodPost, "/transactions", url.Values{"version": {itoa(version)}}, nil, &tx); err != nil {
		return out, fmt.Errorf("start transaction: %w", err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		// The request's context may be done; a transaction left open never
		// expires and counts against the API's limit, so clean up regardless.
		if derr := c.deleteTransaction(context.WithoutCancel(ctx), tx.ID); derr != nil {
			err = fmt.Errorf("%w (and delete transaction %s: %v)", err, tx.ID, derr)
		}
	}()
	in := url.Values{"transaction_id": {tx.ID}}
	defer func() {
		// A transaction that vanished was swept by another writer whose
		// commit outdated it: we lost a race, re-read and try again.
		var apiErr *APIError
		if err != nil && errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			err = &failure.ConflictError{Msg: fmt.Sprintf("transaction %s is gone (another writer committed first): %v", tx.ID, err)}
		}
	}()

	if p.Settings != nil {
		bePath := "/configuration/backends/" + url.PathEscape(p.Backend)
		var be models.Backend
		if _, err := c.do(ctx, http.MethodGet, bePath, in, nil, &be); err != nil {
			return out, fmt.Errorf("read backend %s: %w", p.Backend, err)
		}
		applySettings(&be, p.Settings.New)
		if _, err := c.do(ctx, http.MethodPut, bePath, in, &be, nil); err != nil {
			return out, fmt.Errorf("update backend %s: %w", p.Backend, err)
		}
		out.Count(plan.TransactionWrite)
	}
	for _, ch := range changes {
		var err error
		switch ch.Action {
		case plan.Add:
			var body *models.Server
			loaded := *ch.New
			if ch.Gate {
				// Held until its check passes: written in maintenance, so
				// that the reload this commit asks for never loads a server
				// no check passed for (HAProxy loads every other server UP).
				loaded.State, loaded.Reason = model.Maint, ""
			}
			if body, err = serverModel(loaded, nil); err == nil {
				_, err = c.do(ctx, http.MethodPost, "/configuration/backends/"+url.PathEscape(p.Backend)+"/servers", in, body, nil)
			}
		case plan.Delete:
			_, err = c.do(ctx, http.MethodDelete, serverPath(ch.Name), in, nil, nil)
		default:
			var body *models.Server
			if body, err = serverModel(*ch.New, ch.Old.Source); err == nil {
				_, err = c.do(ctx, http.MethodPut, serverPath(ch.Name), in, body, nil)
			}
		}
		if err != nil {
			return out, fmt.Errorf("%s server %s/%s: %w", ch.Action, p.Backend, ch.Name, err)
		}
		out.Count(plan.TransactionWrite)
	}
	if _, err := c.do(ctx, http.MethodPut, "/transactions/"+url.PathEscape(tx.ID), nil, nil, nil); err != nil {
		return out, fmt.Errorf("commit transaction %s: %w", tx.ID, err)
	}
	committed = true
	out.Count(plan.TransactionWrite)
	out.Reload = true // a commit always reloads: 202 when scheduled, 200 when forced
	// The commit outdated every transaction started at or before our version,
	// leftovers included; clear them now. A failure here is left to the next
	// sweep: the change itself is committed.
	_ = c.sweepTransactions(ctx, version+1)
	return out, nil
}

// deleteTransaction deletes a transaction that will not be committed, trying
// again within one second: the API may be failing for a moment. It does not
// try harder, so that the answer is not held up: what it cannot delete, the
// next transaction's sweep does. Gone already (404) is fine: a commit whose
// answer was lost, or a sweep.
func (c *Client) deleteTransaction(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var err error
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		_, err = c.do(ctx, http.MethodDelete, "/transactions/"+url.PathEscape(id), nil, nil, nil)
		var apiErr *APIError
		if err == nil || errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// sweepTransactions deletes transactions that can never be committed: those
// started before the current version (the commit would be refused) and
// those already failed or outdated. Such leftovers come from a writer that
// lost the API before it could clean up; they never expire and count against
// the API's limit on open transactions, so the next transaction clears them.
// Another writer's transaction at the current version is left alone.
func (c *Client) sweepTransactions(ctx context.Context, version int64) error {
	var list models.Transactions
	if _, err := c.do(ctx, http.MethodGet, "/transactions", nil, nil, &list); err != nil {
		return fmt.Errorf("list transactions: %w", err)
	}
	for _, t := range list {
		if t == nil || t.Status == "in_progress" && t.Version >= version {
			continue
		}
		if _, err := c.do(ctx, http.MethodDelete, "/transactions/"+url.PathEscape(t.ID), nil, nil, nil); err != nil {
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
				return fmt.Errorf("delete stale transaction %s: %w", t.ID, err)
			}
		}
	}
	return nil
}
