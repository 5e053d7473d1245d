package kernel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/kernel/api"
)

// Replay replays the inputs among args with the options among args, shows a progress bar while the
// engine works (in a GoNB cell), and returns the result tables:
//
//	res, err := c.Replay(ctx, kernel.Text("The quick brown fox"), kernel.TopK(5), kernel.Lens(3))
//
// It is Submit, Wait and Fetch in one, and fails as they do, with no result: an argument that cannot
// apply or nothing to replay (before anything is sent), a refused request (a *ServerError naming the
// input, option or limit: a layer outside the model, a top-k past the limit), a job that failed or was
// cancelled (the engine's message), an engine that stops answering. If ctx ends first, the job goes on
// in the engine and the error says its id, for Fetch from a later cell (or, when ctx ends before the
// engine answered the submission, that the job may be queued and how to find it among Jobs).
func (c *Client) Replay(ctx context.Context, args ...Arg) (*Result, error) {
	st, err := c.Submit(ctx, args...)
	if err != nil {
		return nil, err
	}
	if st, err = c.Wait(ctx, st.ID); err != nil {
		return nil, err
	}
	return c.Fetch(ctx, st.ID)
}

// Submit queues a job and returns its status at once; its id is what Wait, Fetch and Cancel take. It is
// an error, with nothing queued, when an argument cannot apply or no argument adds an input, and a
// *ServerError when the engine refuses the request (400 naming the input or option at fault, 413 naming
// the limit's flag). When the answer is lost after the request may have reached the engine (ctx ends
// first, the connection breaks, the answer does not parse), the job may be queued all the same, with no
// id to show for it: the error says so, and how to find it among Jobs (its time, sequences and label).
func (c *Client) Submit(ctx context.Context, args ...Arg) (api.JobStatus, error) {
	req, err := buildRequest(args)
	if err != nil {
		return api.JobStatus{}, err
	}
	return c.submit(ctx, req)
}

// submit posts req; see Submit.
func (c *Client) submit(ctx context.Context, req api.Request) (api.JobStatus, error) {
	var st api.JobStatus
	if err := ctx.Err(); err != nil { // not sent at all: say so, rather than that it may have been queued
		return st, fmt.Errorf("kernel: not submitted: %w", err)
	}
	sent := time.Now()
	if err := c.getJSON(ctx, http.MethodPost, api.PathJobs, req, &st); err != nil {
		return api.JobStatus{}, unanswered(req, sent, err)
	}
	return st, nil
}

// unanswered is err, a failed submission of req sent at sent, with a warning when the engine may have
// queued the job although no answer came back: the engine picks the id, so the client cannot name the
// job, only say how to find it. The engine's own refusals (a *ServerError) and a connection that was
// never made (a refused dial) queued nothing and pass through.
func unanswered(req api.Request, sent time.Time, err error) error {
	var se *ServerError
	var op *net.OpError
	if errors.As(err, &se) || (errors.As(err, &op) && op.Op == "dial") {
		return err
	}
	which := fmt.Sprintf("created at %s or a little later, with %s", sent.Format("15:04:05"), numtext.Count(len(req.Inputs), "sequence"))
	if req.Label != "" {
		which += fmt.Sprintf(" and the label %q", req.Label)
	} else {
		which += " (a Label would name it)"
	}
	return fmt.Errorf("kernel: no answer to the submission (%w): the engine may have queued the job all the same; Jobs(ctx) lists its jobs, oldest first: look for one %s, then Wait for it or Cancel it rather than submit it twice",
		err, which)
}

// Wait follows job id's progress until it is done and shows it (a bar in a notebook, lines on the
// Connect option WithProgress's writer elsewhere). A failed or cancelled job is an error with the
// engine's message, returned with the job's status; an empty id is an error, and an unknown one a
// *ServerError of status 404. When the progress stream breaks, Wait follows the job's status instead;
// when ctx ends first, the error says that the job goes on in the engine, and its id.
func (c *Client) Wait(ctx context.Context, id string) (api.JobStatus, error) {
	if err := checkID(id); err != nil {
		return api.JobStatus{}, err
	}
	view := c.newView(id)
	last, err := c.follow(ctx, id, view.update)
	if err != nil {
		if ctx.Err() != nil {
			view.fail(last, err)
			return api.JobStatus{}, fmt.Errorf("kernel: job %s is still on the engine (fetch it later with Fetch(ctx, %q)): %w", id, id, err)
		}
		err = c.lost(id, err)
		view.fail(last, err)
		return api.JobStatus{}, err
	}
	st, err := c.Status(ctx, id)
	if err != nil {
		err = c.lostAfter(id, last, err)
		if last.State == api.StateDone {
			view.finish(last)
		} else {
			view.fail(last, err)
		}
		return st, err
	}
	view.finish(last)
	switch st.State {
	case api.StateDone:
		return st, nil
	case api.StateCancelled:
		return st, fmt.Errorf("kernel: job %s was cancelled: %s", id, st.Error)
	default:
		return st, fmt.Errorf("kernel: job %s %s: %s", id, st.State, st.Error)
	}
}

// lost names job id in an error that is not the engine's own answer (a refused or broken connection:
// the engine stopped, or was killed), and says what to do; the engine's answers (a 404, a 401) and
// errors that carry the job already pass through.
func (c *Client) lost(id string, err error) error {
	var se *ServerError
	if errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	where := ""
	if c.logPath != "" {
		where = ", and see its log at " + c.logPath
	}
	return fmt.Errorf("kernel: job %s: the engine stopped answering (%w): Connect again%s", id, err, where)
}

// lostAfter is lost for an engine that stopped answering just after its progress stream's last report,
// last, said the job ended (a server shut down once its wave was over, or killed then): the status that
// Wait asks for next would only say that the engine is gone, so the report says how the job ended: a
// failed or cancelled job with the engine's reason, a done one with where its results are (spilled:
// the next engine on the same spill directory serves them).
func (c *Client) lostAfter(id string, last api.Progress, err error) error {
	var se *ServerError
	if !last.State.Terminal() || errors.As(err, &se) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return c.lost(id, err)
	}
	where := ""
	if c.logPath != "" {
		where = " (its log: " + c.logPath + ")"
	}
	switch last.State {
	case api.StateDone:
		return fmt.Errorf("kernel: job %s is done, but the engine stopped answering before its results were fetched (%w): they stay in its spill directory: Connect again, then Fetch(ctx, %q)%s", id, err, id, where)
	case api.StateCancelled:
		return fmt.Errorf("kernel: job %s was cancelled: %s; the engine has stopped answering since (%w)%s", id, last.Error, err, where)
	default:
		return fmt.Errorf("kernel: job %s %s: %s; the engine has stopped answering since (%w)%s", id, last.State, last.Error, err, where)
	}
}

// follow calls update with each progress report of job id until one is terminal, which it returns. It
// reads the progress stream and opens it again if it breaks; after repeated breaks it polls the status.
func (c *Client) follow(ctx context.Context, id string, update func(api.Progress)) (api.Progress, error) {
	var last api.Progress
	var err error
	for attempt := 0; ; attempt++ {
		// A stream that fails before its first line reports nothing: keep what the last one said, for
		// the display of why waiting stopped.
		var p api.Progress
		p, err = c.stream(ctx, id, update)
		if p.State != "" {
			last = p
		}
		if err == nil && p.State.Terminal() {
			return last, nil
		}
		var se *ServerError
		if ctx.Err() != nil || errors.As(err, &se) { // a 404 or 401 will not mend by asking again
			return last, err
		}
		if attempt >= 3 {
			break
		}
		if !sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond) {
			return last, ctx.Err()
		}
	}
	for { // the stream keeps breaking (a proxy?): poll
		st, err := c.Status(ctx, id)
		if err != nil {
			return last, err
		}
		if st.Progress != nil {
			last = *st.Progress
			update(last)
		}
		if st.State.Terminal() {
			return last, nil
		}
		if !sleep(ctx, time.Second) {
			return last, ctx.Err()
		}
	}
}

// stream reads the progress stream of job id once, to its end or its break.
func (c *Client) stream(ctx context.Context, id string, update func(api.Progress)) (api.Progress, error) {
	var last api.Progress
	resp, err := c.request(ctx, http.MethodGet, api.ProgressPath(id), nil)
	if err != nil {
		return last, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p api.Progress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return last, fmt.Errorf("kernel: job %s: progress line %q: %w", id, sc.Text(), err)
		}
		last = p
		update(p)
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("kernel: job %s: progress stream: %w", id, err)
	}
	return last, nil
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
