#include "mixtrain/base/scalar.h"

namespace mixtrain {

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Floating: return os << s.toDouble();
    case Scalar::Kind::Integral: return os << s.toLong();
    case Scalar::Kind::Bool: return os << (s.toBool() ? "true" : "false");
  }
  return os;
}

}  // namespace mixtrain
