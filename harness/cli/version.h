#ifndef KB_VERSION_H
#define KB_VERSION_H

#include "version_gen.h"

#define KB_VERSION "0.1.0"

#endif
