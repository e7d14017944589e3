// NOTE [fmt from libtorch's include path]: libtorch 2 ships fmt's headers (fmt 12 in 2.15) on its
// include path, ahead of Debian's fmt 9, and its own headers include them, so every loom source
// sees that fmt; libtorch exports none of fmt's functions, and Debian's libfmt.so is another
// version. fmt's compiled part is therefore compiled here, once, and the rest of loom (and a
// program on the installed libloom.so) uses fmt's headers as a library's. Header-only
// (FMT_HEADER_ONLY) compiled fmt's formatting core into every source again: 5-9 s more for each of
// loom's ~150 sources at -O3 on this project's machines, which doubled the build.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
// The locale queries fmt's headers declare for char and leave to the library to instantiate.
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl<char>(locale_ref) -> char;
}  // namespace detail
FMT_END_NAMESPACE
