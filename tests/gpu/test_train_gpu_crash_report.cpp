// Stack traces for crashes in the GPU tests.
#include "common/CrashReport.h"
