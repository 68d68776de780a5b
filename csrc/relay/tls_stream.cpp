#include "tls_stream.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace mxkv::relay {
namespace {

// what one read or SSL_write takes on: the grain at which the relays and their ends work
constexpr size_t kReadBytes = 256 << 10;
// plain bytes each direction holds, read and not yet written
constexpr size_t kPendingBytes = 1 << 20;
// ciphertext each direction of the BIO pair holds
constexpr size_t kRingBytes = 1 << 20;
constexpr char kCipherSuites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// OpenSSL's reason for the last failure on this thread (its queue is emptied), or `otherwise`.
std::string openssl_reason(const std::string& otherwise) {
  unsigned long code = ERR_get_error();
  if (code == 0) return otherwise;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error(std::string("fcntl: ") + strerror(errno));
}

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

TlsContext::TlsContext(const std::string& key_path, bool server) : server_(server) {
  context_ = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!context_) throw TlsFailure(openssl_reason("SSL_CTX_new failed"));
  SSL_CTX_set_min_proto_version(context_, TLS1_3_VERSION);
  // AES-128-GCM first (both relays are this code; the server's order decides): ~10 % less CPU
  // than AES-256-GCM here, and TLS 1.3's mandatory suite, so a Python peer speaks it too
  SSL_CTX_set_ciphersuites(context_, kCipherSuites);
  SSL_CTX_set_options(context_, SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(context_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const char* path = key_path.c_str();
  if (SSL_CTX_use_certificate_chain_file(context_, path) != 1 ||
      SSL_CTX_use_PrivateKey_file(context_, path, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(context_, path, nullptr) != 1) {
    std::string reason = openssl_reason("unreadable");
    SSL_CTX_free(context_);
    throw TlsFailure("the job key " + key_path + ": " + reason);
  }
  SSL_CTX_set_verify(context_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

TlsContext::~TlsContext() { SSL_CTX_free(context_); }

void Pending::taken(size_t count) {
  begin_ += count;
  if (begin_ == end_) begin_ = end_ = 0;
}

void Pending::compact() {
  std::copy(bytes_.begin() + begin_, bytes_.begin() + end_, bytes_.begin());
  end_ -= begin_;
  begin_ = 0;
}

void Pending::append(const std::string& bytes) {
  std::copy(bytes.begin(), bytes.end(), tail());
  added(bytes.size());
}

TlsStream::TlsStream(std::shared_ptr<TlsContext> context, int fd)
    : context_(std::move(context)), ssl_(nullptr), network_(nullptr), fd_(fd) {
  set_nonblocking(fd_);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  BIO* internal = nullptr;
  ssl_ = SSL_new(context_->get());
  if (stop_fd_ < 0 || !ssl_ ||
      BIO_new_bio_pair(&internal, kRingBytes, &network_, kRingBytes) != 1) {
    if (ssl_) SSL_free(ssl_);
    if (stop_fd_ >= 0) close(stop_fd_);
    close(fd_);
    throw TlsFailure(openssl_reason("cannot set up a TLS connection"));
  }
  SSL_set_bio(ssl_, internal, internal);  // (SSL_free frees it)
  if (context_->server())
    SSL_set_accept_state(ssl_);
  else
    SSL_set_connect_state(ssl_);
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);
  BIO_free(network_);
  close(fd_);
  close(stop_fd_);
}

void TlsStream::stop() {
  uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
}

void TlsStream::wait(short events, double deadline) const {
  while (true) {
    pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
    double left = deadline - now();
    if (left <= 0) throw TimedOut("timed out");
    int ready = poll(fds, 2, static_cast<int>(std::ceil(left * 1000)));
    if (ready < 0 && errno != EINTR) throw TlsFailure(std::string("poll: ") + strerror(errno));
    if (fds[1].revents) throw TlsFailure("stopped");
    if (fds[0].revents) return;
  }
}

bool TlsStream::send_written() {
  char* bytes = nullptr;
  for (int ready; (ready = BIO_nread0(network_, &bytes)) > 0;) {
    ssize_t sent = ::send(fd_, bytes, ready, MSG_NOSIGNAL);
    if (sent < 0 && would_block(errno)) return false;
    if (sent < 0) throw TlsFailure(strerror(errno));
    BIO_nread(network_, &bytes, static_cast<int>(sent));
  }
  return true;
}

long TlsStream::receive() {
  char* room = nullptr;
  int free = BIO_nwrite0(network_, &room);
  if (free <= 0) return -1;
  ssize_t got = ::recv(fd_, room, free, 0);
  if (got < 0 && would_block(errno)) return -1;
  if (got < 0) throw TlsFailure(strerror(errno));
  if (got == 0) {
    BIO_shutdown_wr(network_);  // OpenSSL reads the end after the bytes before it
    return 0;
  }
  BIO_nwrite(network_, &room, static_cast<int>(got));
  return got;
}

void TlsStream::serve_wants(int result, double deadline, const char* what) {
  int error = SSL_get_error(ssl_, result);
  while (!send_written()) wait(POLLOUT, deadline);
  if (error == SSL_ERROR_WANT_WRITE) return;  // sent: the ring has room again
  if (error == SSL_ERROR_WANT_READ) {
    while (receive() < 0) wait(POLLIN, deadline);
    return;
  }
  if (error == SSL_ERROR_ZERO_RETURN) throw TlsFailure(std::string(what) + ": the peer ended");
  throw TlsFailure(openssl_reason(std::string(what) + ": the peer ended"));
}

void TlsStream::handshake(double seconds) {
  double deadline = now() + seconds;
  ERR_clear_error();
  for (int result; (result = SSL_do_handshake(ssl_)) != 1;)
    serve_wants(result, deadline, "the handshake");
  while (!send_written()) wait(POLLOUT, deadline);  // the last flight
}

std::string TlsStream::read_line(size_t most, double seconds) {
  double deadline = now() + seconds;
  std::string line(most, '\0');
  size_t got = 0;
  while (got < most) {
    size_t read = 0;
    ERR_clear_error();
    int result = SSL_read_ex(ssl_, line.data() + got, most - got, &read);
    if (result != 1) {
      serve_wants(result, deadline, "a line");
      continue;
    }
    got += read;
    auto newline = std::find(line.begin(), line.begin() + got, '\n');
    if (newline != line.begin() + got) {
      size_t length = newline - line.begin() + 1;
      carried_.assign(line.data() + length, got - length);
      line.resize(length);
      return line;
    }
  }
  throw TlsFailure("no line within " + std::to_string(most) + " bytes");
}

void TlsStream::write(const std::string& bytes, double seconds) {
  double deadline = now() + seconds;
  size_t sent = 0;
  while (sent < bytes.size()) {
    size_t wrote = 0;
    ERR_clear_error();
    int result = SSL_write_ex(ssl_, bytes.data() + sent, bytes.size() - sent, &wrote);
    if (result == 1)
      sent += wrote;
    else
      serve_wants(result, deadline, "a write");
  }
  while (!send_written()) wait(POLLOUT, deadline);
}

void TlsStream::carry(int plain_fd) {
  set_nonblocking(plain_fd);
  Pending out(kPendingBytes), in(kPendingBytes);  // out: plain -> TLS; in: TLS -> plain
  in.append(carried_);
  bool plain_open = true, tls_open = true, broken = false;
  size_t retry = 0;  // the length of an SSL_write that asked to be called again
  try {
    while (true) {
      bool moved = false;
      short plain_events = 0, tls_events = 0;
      // Each side takes on more only while less than a grain of it waits for the next:
      // topping up a buffer whose reader is blocked, a few KiB at a time, would spin
      // (measured: relay A made 70783 sends that found the socket full and 17 polls)
      if (plain_open && out.size() < kReadBytes) {
        out.compact();
        ssize_t got = ::read(plain_fd, out.tail(), std::min(out.room(), kReadBytes));
        if (got > 0)
          out.added(got), moved = true;
        else if (got < 0 && would_block(errno))
          plain_events |= POLLIN;
        else
          plain_open = false;
      }
      // encrypted into the ring, a record per SSL_write (partial writes), until a grain waits
      while (!broken && out.size() && BIO_ctrl_pending(network_) < kReadBytes) {
        size_t length = retry ? retry : std::min(out.size(), kReadBytes), wrote = 0;
        ERR_clear_error();
        if (SSL_write_ex(ssl_, out.head(), length, &wrote) == 1) {
          out.taken(wrote), retry = 0, moved = true;
          continue;
        }
        if (SSL_get_error(ssl_, 0) == SSL_ERROR_WANT_WRITE)
          retry = length;  // the ring is full
        else
          broken = true;
        break;
      }
      size_t unsent = BIO_ctrl_pending(network_);
      if (!send_written()) tls_events |= POLLOUT;
      if (BIO_ctrl_pending(network_) < unsent) moved = true;
      if (tls_open && BIO_ctrl_get_write_guarantee(network_) > 0) {  // (else SSL_read makes room)
        long got = receive();
        if (got > 0) moved = true;
        if (got < 0) tls_events |= POLLIN;
      }
      if (tls_open && in.size() < kReadBytes) in.compact();
      while (tls_open && in.size() < kReadBytes) {  // SSL_read returns one record at a time
        size_t got = 0;
        ERR_clear_error();
        if (SSL_read_ex(ssl_, in.tail(), std::min(in.room(), kReadBytes), &got) == 1) {
          in.added(got), moved = true;
          continue;
        }
        if (SSL_get_error(ssl_, 0) != SSL_ERROR_WANT_READ)
          tls_open = false;        // close_notify, the socket's end, or a broken record
        else if (!send_written())  // (TLS 1.3 may answer a record: a key update)
          tls_events |= POLLOUT;
        break;
      }
      if (in.size()) {
        ssize_t wrote = ::send(plain_fd, in.head(), in.size(), MSG_NOSIGNAL);
        if (wrote > 0)
          in.taken(wrote), moved = true;
        else if (wrote < 0 && would_block(errno))
          plain_events |= POLLOUT;
        else
          broken = true;
      }
      if (broken || (!plain_open && !out.size()) || (!tls_open && !in.size())) break;
      if (moved) continue;
      // a side with nothing asked of it is left out (-1), or its hang-up would wake every poll
      pollfd fds[3] = {{plain_events ? plain_fd : -1, plain_events, 0},
                       {tls_events ? fd_ : -1, tls_events, 0},
                       {stop_fd_, POLLIN, 0}};
      if (poll(fds, 3, -1) < 0 && errno != EINTR) break;
      if (fds[2].revents) break;
    }
    if (!broken) {  // close_notify, and what is still in the ring, if the socket takes it now
      SSL_shutdown(ssl_);
      send_written();
    }
  } catch (const TlsFailure&) {
    // the socket failed: the connection ends, as it would have at the next byte
  }
  ERR_clear_error();
  ::close(plain_fd);
}

}  // namespace mxkv::relay
