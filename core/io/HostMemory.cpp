#include "io/HostMemory.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace strata::io {

void releaseFreedHostMemory() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

}  // namespace strata::io
