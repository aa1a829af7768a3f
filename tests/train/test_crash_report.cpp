// Stack traces for crashes in the train tests.
#include "common/CrashReport.h"
