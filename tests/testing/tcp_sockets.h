// tcpSocketsReport: the kernel's view of every TCP connection this process holds (both ends of a
// loopback connection when the service runs in the test process), for a test's stall
// diagnosis. A stall the sockets explain (a retransmission timer backed off for seconds, a zero
// window, bytes queued and unread) is told apart from one in the code under test.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mocker::testing {

namespace detail {

inline int portOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

/// One line for descriptor `fd`, or "" when it is not a connected TCP socket.
inline std::string tcpSocketLine(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return "";
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return "";  // a listening socket
  }
  int unread = -1, unsent = -1;
  (void)::ioctl(fd, SIOCINQ, &unread);
  (void)::ioctl(fd, SIOCOUTQ, &unsent);
  char line[320];
  std::snprintf(line, sizeof line,
                "tcp :%d -> :%d state %u: recv-q %d, send-q %d, rto %u ms, backoff %u, "
                "retransmits %u (total %u), probes %u, unacked %u, lost %u, rcv_space %u, "
                "last data sent/received %u/%u ms ago\n",
                portOf(local), portOf(peer), info.tcpi_state, unread, unsent, info.tcpi_rto / 1000,
                info.tcpi_backoff, info.tcpi_retransmits, info.tcpi_total_retrans, info.tcpi_probes,
                info.tcpi_unacked, info.tcpi_lost, info.tcpi_rcv_space, info.tcpi_last_data_sent,
                info.tcpi_last_data_recv);
  return line;
}

}  // namespace detail

/// One line per connected TCP socket of this process (from /proc/self/fd).
inline std::string tcpSocketsReport() {
  std::string out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return "tcp sockets: /proc/self/fd unreadable\n";
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    out += detail::tcpSocketLine(static_cast<int>(fd));
  }
  ::closedir(dir);
  return out.empty() ? "tcp sockets: none connected\n" : out;
}

}  // namespace mocker::testing
