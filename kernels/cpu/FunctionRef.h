// A reference to a callable, for loop bodies and GEMM epilogues that run while the call that takes them
// runs: unlike std::function it never allocates (a lambda capturing a few references does not fit
// std::function's inline buffer), so a plan step allocates nothing.
#ifndef TEC_KERNELS_CPU_FUNCTIONREF_H
#define TEC_KERNELS_CPU_FUNCTIONREF_H

#include <type_traits>
#include <utility>

namespace tec::kernels::cpu {

template <typename Signature> class FunctionRef;

template <typename R, typename... Args> class FunctionRef<R(Args...)> {
public:
  FunctionRef() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(const F &f)
      : object(&f), call([](const void *o, Args... args) -> R { return (*static_cast<const F *>(o))(args...); }) {}
  explicit operator bool() const { return call != nullptr; }
  R operator()(Args... args) const { return call(object, std::forward<Args>(args)...); }

private:
  const void *object = nullptr;
  R (*call)(const void *, Args...) = nullptr;
};

} // namespace tec::kernels::cpu

#endif
