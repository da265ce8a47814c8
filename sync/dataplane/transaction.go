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

// inTransaction runs write inside a new transaction started at version and
// commits it: the one lifecycle of every transaction the client makes. It
// sweeps leftovers first; a transaction not committed is deleted even when
// ctx is done (one left open never expires and counts against the API's
// limit); a 404 on the way (the transaction, or something it writes, is
// gone: another writer's commit outdated it) is a lost race, re-read and
// try again. After the commit it clears the transactions the commit
// outdated; a failure there is left to the next sweep.
func (c *Client) inTransaction(ctx context.Context, version int64, write func(in url.Values) error) (err error) {
	_, err = c.inTransactionReload(ctx, version, write)
	return err
}

// inTransactionReload is inTransaction that also says which reload the
// commit scheduled or joined (its Reload-ID; "" when the API did not say).
func (c *Client) inTransactionReload(ctx context.Context, version int64, write func(in url.Values) error) (reloadID string, err error) {
	if err := c.sweepTransactions(ctx, version); err != nil {
		return "", err
	}
	var tx models.Transaction
	if _, err := c.do(ctx, http.MethodPost, "/transactions", url.Values{"version": {itoa(version)}}, nil, &tx); err != nil {
		return "", fmt.Errorf("start transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			if derr := c.deleteTransaction(context.WithoutCancel(ctx), tx.ID); derr != nil {
				err = fmt.Errorf("%w (and delete transaction %s: %v)", err, tx.ID, derr)
			}
		}
		var apiErr *APIError
		if err != nil && errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
			err = &failure.ConflictError{Msg: fmt.Sprintf("transaction %s: something is gone (another writer committed first): %v", tx.ID, err)}
		}
	}()
	if err := write(url.Values{"transaction_id": {tx.ID}}); err != nil {
		return "", err
	}
	r, err := c.do(ctx, http.MethodPut, "/transactions/"+url.PathEscape(tx.ID), nil, nil, nil)
	if err != nil {
		return "", fmt.Errorf("commit transaction %s: %w", tx.ID, err)
	}
	committed = true
	_ = c.sweepTransactions(ctx, version+1)
	return r.reloadID, nil
}

// transaction writes the structural changes in one transaction and commits it.
func (c *Client) transaction(ctx context.Context, version int64, p plan.Plan, changes []plan.Change, serverPath func(string) string) (out plan.Applied, err error) {
	reloadID, err := c.inTransactionReload(ctx, version, func(in url.Values) error {
		return c.writeChanges(ctx, in, p, changes, serverPath, &out)
	})
	if p.Settings != nil {
		// Committed or not known (an answer lost): the running HAProxy
		// may run the old check until the API's reload (settingsLoading).
		c.settingsWritten.Store(p.Backend, settingsMark{gen: c.settingsGen.Add(1), reloadID: reloadID})
	}
	if err != nil {
		return out, err
	}
	out.Count(plan.TransactionWrite) // the commit
	out.Reload = true                // a commit always reloads: 202 when scheduled, 200 when forced
	return out, nil
}

// writeChanges writes the backend's settings and the servers' changes into
// transaction in, counting each write in out.
func (c *Client) writeChanges(ctx context.Context, in url.Values, p plan.Plan, changes []plan.Change, serverPath func(string) string, out *plan.Applied) error {
	if p.Settings != nil {
		bePath := "/configuration/backends/" + url.PathEscape(p.Backend)
		var be models.Backend
		if _, err := c.do(ctx, http.MethodGet, bePath, in, nil, &be); err != nil {
			return fmt.Errorf("read backend %s: %w", p.Backend, err)
		}
		applySettings(&be, p.Settings.New)
		if _, err := c.do(ctx, http.MethodPut, bePath, in, &be, nil); err != nil {
			return fmt.Errorf("update backend %s: %w", p.Backend, err)
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
			return fmt.Errorf("%s server %s/%s: %w", ch.Action, p.Backend, ch.Name, err)
		}
		out.Count(plan.TransactionWrite)
	}
	return nil
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
