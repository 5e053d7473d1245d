package kernel

import "context"

// Every notebook cell that connected only to ask one question repeated the same six lines: Connect,
// check, defer Close, the call, check, defer Release. The functions here are the first four in one call:
// the client they open belongs to the result, and the result's Release closes it.

// ReplayCached connects as Connect() does (no options: $POTATO_ADDR and $POTATO_TOKEN, else the
// background engine, started on first use), calls the method [Client.ReplayCached] with ctx and args,
// and returns its result, whose Release also closes the client it opened:
//
//	res, err := kernel.ReplayCached(ctx, kernel.Example("greeting"), kernel.TopK(5))
//	check(err)
//	defer res.Release()
//
// It exists for the cell that connects only to replay one request. A cell that needs the client for
// more (Info, several requests, Submit and Fetch, Cancel, Jobs) or Connect's options (WithAddr,
// WithModel, WithProgress, ...) calls Connect and the methods itself; Shutdown is package-level already.
//
// Args that cannot apply (an unknown Example, nothing to replay) are an error before anything connects,
// so that a typo starts no engine. Otherwise it fails as Connect does (ctx does not bound the connection:
// Connect takes none) and as the method does, and on every error it closes the client it opened, if any,
// before it returns.
func ReplayCached(ctx context.Context, args ...Arg) (*Result, error) {
	return connectFor(ctx, args, (*Client).ReplayCached)
}

// Replay is ReplayCached without the results cache: Connect, then the method [Client.Replay], every call
// a new replay, and the result's Release closes the client. It is for a result not worth keeping on disk
// (the cache is never trimmed, and LensAll or Hidden of every layer of a real model is large) or a
// replay that must run again.
func Replay(ctx context.Context, args ...Arg) (*Result, error) {
	return connectFor(ctx, args, (*Client).Replay)
}

// connectFor checks args, connects, and runs replay on the new client: the result owns the client (its
// Release closes it); on an error the client is closed here.
func connectFor(ctx context.Context, args []Arg, replay func(*Client, context.Context, ...Arg) (*Result, error)) (*Result, error) {
	if _, err := buildRequest(args); err != nil { // the method would say the same, after a possible engine start
		return nil, err
	}
	c, err := Connect()
	if err != nil {
		return nil, err
	}
	r, err := replay(c, ctx, args...)
	if err != nil {
		c.Close()
		return nil, err
	}
	r.owned = c
	return r, nil
}
