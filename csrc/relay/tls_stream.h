// One TLS 1.3 connection between two relays (mxkv_hybrid/launch/relay.py), in OpenSSL on a
// socket it owns, and the copy loop that carries a local node's connection through it. The
// relay's policy (who may connect, to which node, what is logged) stays in Python; what
// every byte passes through is here: one thread per connection, both directions at once on
// non-blocking sockets. OpenSSL reads and writes the socket through a BIO pair whose ring
// buffers the socket fills and drains in place: one send() moves many 16 KiB records, where
// OpenSSL's own socket BIO makes a system call (and a TCP segment train) per record.
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxkv::relay {

// A TLS failure: a handshake a stranger fails, a peer's broken record. Its text is
// OpenSSL's reason.
struct TlsFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An operation that did not finish within its seconds.
struct TimedOut : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// TLS 1.3 only, presenting the job's certificate and requiring the peer's to be it: the
// rules of job_key.tls_context, so either end may be Python's ssl.
class TlsContext {
 public:
  TlsContext(const std::string& key_path, bool server);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return context_; }
  bool server() const { return server_; }

 private:
  SSL_CTX* context_;
  bool server_;
};

// Bytes read from one side and not yet written to the other.
class Pending {
 public:
  explicit Pending(size_t capacity) : bytes_(capacity) {}
  char* head() { return bytes_.data() + begin_; }
  size_t size() const { return end_ - begin_; }
  char* tail() { return bytes_.data() + end_; }
  size_t room() const { return bytes_.size() - end_; }
  void added(size_t count) { end_ += count; }
  void taken(size_t count);  // from the head
  void compact();  // moves what is pending to the front, so that room() is all that is free
  void append(const std::string& bytes);

 private:
  std::vector<char> bytes_;
  size_t begin_ = 0, end_ = 0;
};

class TlsStream {
 public:
  // Takes `fd`, a connected TCP socket.
  TlsStream(std::shared_ptr<TlsContext> context, int fd);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Throws TlsFailure if the peer does not hold the job's key, TimedOut after `seconds`.
  void handshake(double seconds);
  // The first line the peer sends (its newline included), at most `most` bytes; bytes after
  // it are kept for carry(). Throws TlsFailure when there is no newline within `most`.
  std::string read_line(size_t most, double seconds);
  void write(const std::string& bytes, double seconds);
  // Copies bytes both ways between this connection and `plain_fd` (a local TCP socket,
  // which it takes) until either side ends or stop() is called; then sends TLS's
  // close_notify and closes both. Bytes already read from the ending side are delivered.
  void carry(int plain_fd);
  // Ends a carry() or a wait in progress, from any thread.
  void stop();

 private:
  // Waits until the socket is ready for `events` (POLLIN, POLLOUT); throws TimedOut at
  // `deadline` (steady clock seconds) and TlsFailure when stopped.
  void wait(short events, double deadline) const;
  // After an SSL call returned `result`: sends what it wrote and, if it wants to read,
  // receives, waiting until `deadline`; throws on anything else.
  void serve_wants(int result, double deadline, const char* what);
  // Sends what OpenSSL has written as far as the socket takes it now; true once none is left.
  bool send_written();
  // Receives what the socket has now into OpenSSL's side of the pair: the bytes, 0 once the
  // peer has ended (OpenSSL is told), -1 when none are there yet (or the ring is full).
  long receive();

  std::shared_ptr<TlsContext> context_;
  SSL* ssl_;
  BIO* network_;  // this side of the BIO pair; OpenSSL holds the other
  int fd_;
  int stop_fd_;          // an eventfd: readable once stop() is called
  std::string carried_;  // read after the line, before carry()
};

}  // namespace mxkv::relay
