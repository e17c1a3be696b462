// The half types' reductions for the MPI communicator (declared in mpi_util.h).
#include <type_traits>

#include "kernels/comm/mpi_util.h"
#include "kernels/half.h"

namespace dtb {
namespace {

// ---- Reductions on the half types ----
//
// MPI has no bf16 or fp16, so each (format, ReduceOp) gets a user-defined operation on
// MPI_UINT16_T words (distinct operations, since the function must know the format).
// Every one is commutative bitwise, op(a, b) == op(b, a) for all bit patterns, which is
// what keeps an all_reduce bitwise equal on every rank: MPI_Op_create(commute = 1) lets
// the library combine partial results in either operand order, as with MPI_SUM on floats.
//   sum: float(a) + float(b), rounded to the format to nearest even (kernels/half.h). The
//        float sum is exact or rounds once at 24 bits, and 24 >= 2p + 2 (p = 8 bf16, 11
//        fp16), so rounding it again to p bits gives the correctly rounded half sum (double
//        rounding is innocuous then: Figueroa, "When is double rounding innocuous?", 1995).
//        A NaN result (a NaN operand, or inf + -inf) is the canonical quiet NaN (bf16 0x7fc0,
//        fp16 0x7e00), as the float NaN's payload would depend on the operand order.
//   max, min: IEEE 754-2008 maxNum / minNum (C's fmaxf / fminf): one of the operands, bits
//        unchanged; a NaN operand is ignored (both NaN: the canonical NaN); -0 < +0.
// Over n ranks the combination is some tree of n-1 such operations, so a sum is within
// (n-1) roundings of the exact one; which tree is the library's choice.

constexpr uint16_t kBf16Nan = 0x7fc0, kFp16Nan = 0x7e00;

template <typename H> constexpr uint16_t canonical_nan() {
  return std::is_same_v<H, bf16> ? kBf16Nan : kFp16Nan;
}

template <typename H, ReduceOp kOp> uint16_t half_combine(uint16_t a, uint16_t b) {
  const float x = H::from_bits(a), y = H::from_bits(b);
  if constexpr (kOp == ReduceOp::sum) {
    const float s = x + y;
    return s != s ? canonical_nan<H>() : H(s).bits;
  } else {
    if (x != x) return y != y ? canonical_nan<H>() : b;
    if (y != y) return a;
    // Equal values have equal bits except +0 and -0: max keeps +0 (a & b clears the sign
    // unless both are -0), min keeps -0 (a | b).
    if (x == y) return kOp == ReduceOp::max ? uint16_t(a & b) : uint16_t(a | b);
    return (x > y) == (kOp == ReduceOp::max) ? a : b;
  }
}

/// The MPI_User_function: inout[i] = in[i] op inout[i], i < *len, on MPI_UINT16_T words.
template <typename H, ReduceOp kOp>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* /*type: MPI_UINT16_T*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = half_combine<H, kOp>(a[i], b[i]);
}

/// The six operations, [format: 0 bf16, 1 fp16][ReduceOp: sum, max, min].
struct HalfOps {
  MPI_Op op[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                     {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
};

/// Frees the operations. The delete callback of an attribute on MPI_COMM_SELF, which
/// MPI_Finalize deletes first, while MPI is still fully usable (MPI-3.1 section 8.7.1, the
/// standard's finalize hook). Returns the first failing MPI_Op_free's code, which MPI
/// passes on as MPI_Finalize's error.
int free_half_ops(MPI_Comm, int, void* attr, void*) {
  auto* ops = static_cast<HalfOps*>(attr);
  int first_error = MPI_SUCCESS;
  for (auto& row : ops->op)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) {
        const int rc = MPI_Op_free(&op);
        if (rc != MPI_SUCCESS && first_error == MPI_SUCCESS) first_error = rc;
        op = MPI_OP_NULL;
      }
  return first_error;
}

/// Creates the six operations and registers free_half_ops to run in MPI_Finalize. Aborts
/// if an MPI call fails, naming `call` and `group` (the collective that needed them).
HalfOps create_half_ops(const char* call, const std::string& group) {
  const std::string where = std::string(call) + " (half-precision reduction)";
  HalfOps ops;
  MPI_User_function* const fns[2][3] = {
      {half_reduce<bf16, ReduceOp::sum>, half_reduce<bf16, ReduceOp::max>,
       half_reduce<bf16, ReduceOp::min>},
      {half_reduce<fp16, ReduceOp::sum>, half_reduce<fp16, ReduceOp::max>,
       half_reduce<fp16, ReduceOp::min>}};
  for (int f = 0; f < 2; ++f)
    for (int o = 0; o < 3; ++o)
      DTB_MPI_CHECK(MPI_Op_create(fns[f][o], /*commute=*/1, &ops.op[f][o]),
                    "MPI_Op_create for " + where, group);
  return ops;
}

}  // namespace

/// The user-defined operation reducing half type `t` with `op`, created on first use
/// (C++ static initialisation: once per process, thread-safe) and freed in MPI_Finalize.
MPI_Op half_op(DType t, ReduceOp op, const char* call, const std::string& group) {
  static HalfOps ops;
  static const bool ready = [&] {
    ops = create_half_ops(call, group);
    // free_half_ops runs in MPI_Finalize as the delete callback of an attribute on
    // MPI_COMM_SELF. The keyval is freed at once: the attribute stays until deleted
    // (MPI-3.1 section 6.7.2).
    int keyval = MPI_KEYVAL_INVALID;
    DTB_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_half_ops, &keyval, nullptr),
                  "MPI_Comm_create_keyval", group);
    DTB_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, &ops), "MPI_Comm_set_attr", group);
    DTB_MPI_CHECK(MPI_Comm_free_keyval(&keyval), "MPI_Comm_free_keyval", group);
    return true;
  }();
  (void)ready;
  const int f = t == DType::bf16 ? 0 : 1;
  const int o = op == ReduceOp::sum ? 0 : op == ReduceOp::max ? 1 : 2;
  const MPI_Op result = ops.op[f][o];
  DTB_CHECK(result != MPI_OP_NULL, std::string(call) + " on " + group +
                                       ": half-precision operations already freed (MPI_Finalize)");
  return result;
}

}  // namespace dtb
