// Include first in a .cc file that moves Result<T> or vector-holding values through
// kj::Promise: GCC 12 reports -Wmaybe-uninitialized inside kj::ExceptionOr<T> (a
// std::optional or vector in a kj::Maybe) because its inliner loses track of the engaged
// flag (the GCC bug 105593 family). Every such value is constructed before it is read.
// The pragma must precede the KJ headers, as GCC checks the state where the template was
// defined; it applies to the rest of the including file.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
