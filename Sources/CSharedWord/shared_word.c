// The functions are inline in the header; SwiftPM needs one source file per C target.
#include "coffer_shared_word.h"
