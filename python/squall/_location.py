# SPDX-License-Identifier: BSD-3-Clause
"""Where libsquall is: `make install` writes LIBDIR into the installed copy
of this file; in the source tree it is None (set SQUALL_LIBRARY, or rely on
the loader's search). SONAME is the library's major version, kept equal
to configure.ac's by tests (python-package)."""
LIBDIR = None
SONAME = "5"
