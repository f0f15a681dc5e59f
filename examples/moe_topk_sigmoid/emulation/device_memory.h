// The emulated device's global memory: each array a kernel gets is a copy of the caller's, placed so that it ends
// where a page the process may not touch begins (within the 15 bytes that keep the caller's address modulo 16, so
// that unaligned rows stay unaligned), with an untouchable page before it too. A kernel that reads or writes past
// its array faults there, as compute-sanitizer would report it on a GPU (where such an access is often silent):
// `guarded` catches the fault and fails the call with the array and how far past its end the access was, instead
// of letting the kernel read a neighbour's bytes unnoticed. A fault anywhere else is left to crash as it would.
#pragma once

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace simt {

class DeviceArray {
 public:
  // A device copy of `bytes` bytes at `src` (zeros where src is null: an output), named `name` in messages.
  DeviceArray(const char* name, const void* src, size_t bytes)
      : name_(name), bytes_(bytes), page_((size_t)sysconf(_SC_PAGESIZE)) {
    const size_t slack = (32 - (uintptr_t)src % 16 - bytes % 16) % 16;   // keeps the address modulo 16
    body_ = (bytes + slack + page_ - 1) / page_ * page_;
    map_ = static_cast<char*>(mmap(nullptr, body_ + 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                   -1, 0));
    if (map_ == MAP_FAILED) throw std::runtime_error("simt: no memory for a device array");
    mprotect(map_, page_, PROT_NONE);
    mprotect(map_ + page_ + body_, page_, PROT_NONE);
    data_ = map_ + page_ + body_ - bytes - slack;
    if (src) std::memcpy(data_, src, bytes);
    live().push_back(this);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    auto& all = live();
    all.erase(std::remove(all.begin(), all.end(), this), all.end());
    munmap(map_, body_ + 2 * page_);
  }

  void* data() const { return data_; }
  void copy_to(void* dst) const { std::memcpy(dst, data_, bytes_); }

  // Where `addr` falls in one of the arrays' untouchable pages: what the message says of it, else empty.
  static std::string described(uintptr_t addr) {
    for (const DeviceArray* a : live()) {
      const uintptr_t start = (uintptr_t)a->data_, end = start + a->bytes_;
      const uintptr_t front = (uintptr_t)a->map_, back = front + a->page_ + a->body_;
      char why[256];
      if (addr >= back && addr < back + a->page_) {
        std::snprintf(why, sizeof why, "an access at byte %lu past the end of %s (%lu bytes)",
                      (unsigned long)(addr - end), a->name_, (unsigned long)a->bytes_);
        return why;
      }
      if (addr >= front && addr < front + a->page_) {
        std::snprintf(why, sizeof why, "an access at byte %lu before the start of %s",
                      (unsigned long)(start - addr), a->name_);
        return why;
      }
    }
    return "";
  }

 private:
  static std::vector<DeviceArray*>& live() {
    static std::vector<DeviceArray*> arrays;
    return arrays;
  }
  const char* name_;
  size_t bytes_, page_, body_ = 0;
  char* map_ = nullptr;
  char* data_ = nullptr;
};

namespace detail {
inline sigjmp_buf& fault_return() {
  static sigjmp_buf env;
  return env;
}
inline char* fault_message() {
  static char message[320];
  return message;
}
inline struct sigaction& previous_handler() {
  static struct sigaction old;
  return old;
}
inline void on_fault(int, siginfo_t* info, void*) {
  const std::string what = DeviceArray::described((uintptr_t)info->si_addr);
  if (what.empty()) {   // not a device array's guard: the crash it would have been
    sigaction(SIGSEGV, &previous_handler(), nullptr);
    return;
  }
  std::snprintf(fault_message(), 320, "simt: out of bounds: %s", what.c_str());
  siglongjmp(fault_return(), 1);
}
}  // namespace detail

// Runs `call` with faults on the device arrays' guard pages caught: such a fault throws, naming the array. The
// kernel's fibers are abandoned where they stood (the next launch makes new ones).
template <typename Call>
void guarded(Call call) {
  struct Handler {   // the fault handler, installed for the call and restored however it ends
    Handler() {
      struct sigaction act {};
      act.sa_sigaction = detail::on_fault;
      act.sa_flags = SA_SIGINFO | SA_NODEFER;
      sigemptyset(&act.sa_mask);
      sigaction(SIGSEGV, &act, &detail::previous_handler());
    }
    ~Handler() { sigaction(SIGSEGV, &detail::previous_handler(), nullptr); }
  } handler;
  if (sigsetjmp(detail::fault_return(), 1) != 0) {
    current() = nullptr;
    throw std::runtime_error(detail::fault_message());
  }
  call();
}

}  // namespace simt
