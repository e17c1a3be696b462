// The agreement on bad input every rank found (kernels/agreed_error.h).
#include "kernels/agreed_error.h"

#include <algorithm>

namespace dtb {

void agree_on_error(Communicator& comm, const std::string& why) {
  int failed = why.empty() ? 0 : 1, any = failed;
  comm.all_reduce(&any, &any, 1, DType::i32, ReduceOp::max);
  if (!any) return;
  int who = failed ? comm.rank() : comm.size();
  comm.all_reduce(&who, &who, 1, DType::i32, ReduceOp::min);
  std::string msg = comm.rank() == who ? why : std::string();
  int len = int(std::min<size_t>(msg.size(), 4096));
  comm.broadcast(&len, 1, DType::i32, who);
  msg.resize((size_t(len) + 3) / 4 * 4);  // moved as 4-byte words
  if (len) comm.broadcast(msg.data(), msg.size() / 4, DType::i32, who);
  msg.resize(size_t(len));
  throw AgreedInputError(msg);
}

}  // namespace dtb
