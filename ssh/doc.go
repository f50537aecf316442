// Package ssh is replan's way to reach servers: OpenSSH connections built on
// golang.org/x/crypto/ssh (with goph for key and agent authentication).
//
//   - Trust: host keys are verified against a known_hosts file (HostKeys).
//     Only the key types known_hosts holds for a host are negotiated, so a
//     server that prefers another type is not taken for a changed key. An
//     unknown key fails with ErrUnknownHost unless accepting new keys was
//     asked for explicitly; a changed key always fails with
//     ErrHostKeyMismatch, naming both fingerprints. Trust fetches a key for
//     an operator to confirm and AppendKnownHost records it.
//   - Pool: one connection per server, shared, kept alive with
//     keepalive@openssh.com, redialled with exponential backoff when it
//     dies, and at most Config.MaxSessions sessions at once per server.
//   - Run: a command (argv, every argument shell-quoted with Quote) with
//     streamed stdin/stdout/stderr. Cancelling the context kills the remote
//     process group, not just the session.
//   - FanOut / ForEach: the same work on many servers with bounded
//     concurrency, one Result per server, and an optional progress callback
//     (ProgressBar draws one).
//   - Upload: atomic (temp file, chmod, rename) and verified with a
//     sha256sum computed on the server.
//   - DialUnix / HTTPClient: a unix socket on the server (the agent's API)
//     through direct-streamlocal@openssh.com.
//
// The package knows servers, not jobs. Every function that does I/O takes a
// context first; logging goes to the injected *slog.Logger.
package ssh
