// cuDNN's scaled dot-product attention through the graph API, with the cuDNN frontend's dynamic loading:
// the frontend resolves cuDNN's backend entry points from the library Cudnn.cpp opened, so the plugin
// still starts where cuDNN is absent.
#include "kernels/cuda/CudnnAttention.h"

#if TEC_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>

#include <unordered_map>
#include <vector>

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; // the frontend's handle on cuDNN (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
} // namespace cudnn_frontend
#endif

namespace tec::kernels::cuda {

#if TEC_HAVE_CUDNN_FRONTEND

namespace fe = cudnn_frontend;

namespace {

// Tensor uids of the variant pack; FP8's scales and amaxes follow, in the order of AttentionOperands'.
enum Uid : int64_t { kQ = 1, kK, kV, kMask, kOut, kLse, kDout, kDq, kDk, kDv, kScales = 100, kAmaxes = 200 };

fe::DataType_t fp8Type(ElementType t) {
  return t == ElementType::F8E5M2 ? fe::DataType_t::FP8_E5M2 : fe::DataType_t::FP8_E4M3;
}

std::vector<int64_t> contiguous(const std::vector<int64_t> &dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

} // namespace

struct CudnnAttention::Graph {
  std::shared_ptr<fe::graph::Graph> graph;
};

CudnnAttention::CudnnAttention(const CudnnHandle &handle) : handle(handle) {}
CudnnAttention::~CudnnAttention() = default;

std::unique_ptr<CudnnAttention> CudnnAttention::create(const CudnnHandle &handle, const AttentionSpec &spec,
                                                       std::string &why) {
  if (!cudnnAttentionTakes(spec, why))
    return nullptr;
  fe::cudnn_dlhandle = cudnnLibrary(handle.api());
  std::unique_ptr<CudnnAttention> attention(new CudnnAttention(handle));
  attention->spec = spec;
  const AttentionShape &a = spec.shape;
  try {
    auto graph = std::make_shared<fe::graph::Graph>();
    const fe::DataType_t io = spec.fp8                         ? fe::DataType_t::FP8_E4M3
                              : spec.type == ElementType::BF16 ? fe::DataType_t::BFLOAT16
                                                               : fe::DataType_t::HALF;
    graph->set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, int64_t uid, const std::vector<int64_t> &dims) {
      return graph->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(
          contiguous(dims)));
    };
    const std::vector<int64_t> qDims{a.batch, a.heads, a.queries, a.headDim},
        kDims{a.batch, a.kvHeads, a.keys, a.headDim}, vDims{a.batch, a.kvHeads, a.keys, a.valueDim},
        oDims{a.batch, a.heads, a.queries, a.valueDim}, lseDims{a.batch, a.heads, a.queries, 1};
    auto q = tensor("q", kQ, qDims), k = tensor("k", kK, kDims), v = tensor("v", kV, vDims);
    std::shared_ptr<fe::graph::Tensor_attributes> bias;
    if (a.mask == AttentionMask::Additive) { // broadcast batch or heads: size 1 there
      const std::vector<int64_t> dims{a.maskStrides[0] ? a.batch : 1, a.maskStrides[1] ? a.heads : 1, a.queries, a.keys};
      std::vector<int64_t> strides(a.maskStrides, a.maskStrides + 4);
      for (int d = 0; d < 2; ++d)
        strides[d] = strides[d] ? strides[d] : a.queries * a.keys;
      bias = graph->tensor(
          fe::graph::Tensor_attributes().set_name("bias").set_uid(kMask).set_dim(dims).set_stride(strides));
    }
    // The backward's saved logsumexp, f32.
    auto lseInput = [&] {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name("lse")
                               .set_uid(kLse)
                               .set_dim(lseDims)
                               .set_stride(contiguous(lseDims))
                               .set_data_type(fe::DataType_t::FLOAT));
    };
    // FP8's per-tensor scales and amaxes: f32 scalars.
    auto scalar = [&](const char *name, int64_t uid) {
      return graph->tensor(fe::graph::Tensor_attributes()
                               .set_name(name)
                               .set_uid(uid)
                               .set_dim({1, 1, 1, 1})
                               .set_stride({1, 1, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    };
    auto amaxOutput = [&](const std::shared_ptr<fe::graph::Tensor_attributes> &t, int64_t uid) {
      t->set_output(true).set_uid(uid).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(
          fe::DataType_t::FLOAT);
    };
    if (spec.fp8 && !spec.grad) { // scales: q, k, v descales, the probabilities' scale and descale, out's scale
      auto options = fe::graph::SDPA_fp8_attributes()
                         .set_name("attention_fp8")
                         .set_generate_stats(true)
                         .set_attn_scale(a.scale)
                         .set_causal_mask(a.causal);
      auto [out, stats, amaxProbs, amaxOut] =
          graph->sdpa_fp8(q, k, v, scalar("descale_q", kScales + 0), scalar("descale_k", kScales + 1),
                          scalar("descale_v", kScales + 2), scalar("descale_s", kScales + 4),
                          scalar("scale_s", kScales + 3), scalar("scale_o", kScales + 5), options);
      out->set_output(true).set_uid(kOut).set_dim(oDims).set_stride(contiguous(oDims)).set_data_type(
          fe::DataType_t::FP8_E4M3);
      stats->set_output(true).set_uid(kLse).set_data_type(fe::DataType_t::FLOAT).set_dim(lseDims).set_stride(
          contiguous(lseDims));
      amaxOutput(amaxProbs, kAmaxes + 0);
      amaxOutput(amaxOut, kAmaxes + 1);
    } else if (spec.fp8) { // tec.attention_fp8_grad's scales: q, k, v, out, dout descales; probs scale and
                           // descale; dP scale and descale; dq, dk, dv scales
      auto out = tensor("out", kOut, oDims);
      auto dout = tensor("dout", kDout, oDims);
      dout->set_data_type(fp8Type(spec.doutType));
      auto stats = lseInput();
      auto options = fe::graph::SDPA_fp8_backward_attributes()
                         .set_name("attention_fp8_backward")
                         .set_attn_scale(a.scale)
                         .set_causal_mask(a.causal)
                         .set_deterministic_algorithm(true);
      auto [dq, dk, dv, amaxDq, amaxDk, amaxDv, amaxDp] = graph->sdpa_fp8_backward(
          q, k, v, out, dout, stats, scalar("descale_q", kScales + 0), scalar("descale_k", kScales + 1),
          scalar("descale_v", kScales + 2), scalar("descale_o", kScales + 3), scalar("descale_do", kScales + 4),
          scalar("descale_s", kScales + 6), scalar("descale_dp", kScales + 8), scalar("scale_s", kScales + 5),
          scalar("scale_dq", kScales + 9), scalar("scale_dk", kScales + 10), scalar("scale_dv", kScales + 11),
          scalar("scale_dp", kScales + 7), options);
      const fe::DataType_t grads = fp8Type(spec.gradType);
      dq->set_output(true).set_uid(kDq).set_dim(qDims).set_stride(contiguous(qDims)).set_data_type(grads);
      dk->set_output(true).set_uid(kDk).set_dim(kDims).set_stride(contiguous(kDims)).set_data_type(grads);
      dv->set_output(true).set_uid(kDv).set_dim(vDims).set_stride(contiguous(vDims)).set_data_type(grads);
      amaxOutput(amaxDq, kAmaxes + 0);
      amaxOutput(amaxDk, kAmaxes + 1);
      amaxOutput(amaxDv, kAmaxes + 2);
      amaxOutput(amaxDp, kAmaxes + 3);
    } else if (!spec.grad) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("attention")
                         .set_generate_stats(true)
                         .set_attn_scale(a.scale)
                         .set_causal_mask(a.causal);
      if (bias)
        options.set_bias(bias);
      auto [out, stats] = graph->sdpa(q, k, v, options);
      out->set_output(true).set_uid(kOut).set_dim(oDims).set_stride(contiguous(oDims));
      stats->set_output(true).set_uid(kLse).set_data_type(fe::DataType_t::FLOAT).set_dim(lseDims).set_stride(
          contiguous(lseDims));
    } else {
      auto out = tensor("out", kOut, oDims), dout = tensor("dout", kDout, oDims);
      auto stats = lseInput();
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("attention_backward")
                         .set_attn_scale(a.scale)
                         .set_causal_mask(a.causal)
                         .set_deterministic_algorithm(true);
      if (bias)
        options.set_bias(bias);
      auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, out, dout, stats, options);
      dq->set_output(true).set_uid(kDq).set_dim(qDims).set_stride(contiguous(qDims));
      dk->set_output(true).set_uid(kDk).set_dim(kDims).set_stride(contiguous(kDims));
      dv->set_output(true).set_uid(kDv).set_dim(vDims).set_stride(contiguous(vDims));
    }
    auto cudnn = static_cast<cudnnHandle_t>(handle.get());
    auto failed = [&](fe::error_t e, const char *what) {
      if (e.is_good())
        return false;
      why = std::string(what) + ": " + e.get_message();
      return true;
    };
    if (failed(graph->validate(), "validate") || failed(graph->build_operation_graph(cudnn), "operation graph") ||
        failed(graph->create_execution_plans({fe::HeurMode_t::A}), "execution plans") ||
        failed(graph->check_support(cudnn), "no engine") || failed(graph->build_plans(cudnn), "build plans"))
      return nullptr;
    int64_t bytes = 0;
    if (failed(graph->get_workspace_size(bytes), "workspace"))
      return nullptr;
    attention->workspace = static_cast<size_t>(bytes);
    attention->graph = std::make_unique<Graph>(Graph{graph});
  } catch (const std::exception &e) {
    why = std::string("cuDNN's frontend: ") + e.what();
    return nullptr;
  }
  return attention;
}

bool CudnnAttention::run(const AttentionOperands &o, void *workspaceMemory, std::string &error) const {
  std::unordered_map<int64_t, void *> pack{{kQ, const_cast<void *>(o.q)}, {kK, const_cast<void *>(o.k)},
                                           {kV, const_cast<void *>(o.v)}, {kOut, o.out}, {kLse, o.lse}};
  if (spec.shape.mask == AttentionMask::Additive)
    pack[kMask] = const_cast<void *>(o.mask);
  if (spec.grad) {
    pack[kDout] = const_cast<void *>(o.dout);
    pack[kDq] = o.dq, pack[kDk] = o.dk, pack[kDv] = o.dv;
  }
  if (spec.fp8) {
    const int scales = spec.grad ? 12 : 6, amaxes = spec.grad ? 4 : 2;
    for (int i = 0; i < scales; ++i)
      pack[kScales + i] = const_cast<float *>(o.scales[i]);
    for (int i = 0; i < amaxes; ++i)
      pack[kAmaxes + i] = o.amaxes[i];
  }
  try {
    auto status = graph->graph->execute(static_cast<cudnnHandle_t>(handle.get()), pack, workspaceMemory);
    if (status.is_bad()) {
      error = status.get_message();
      return false;
    }
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
  return true;
}

#else // built without the frontend's headers

struct CudnnAttention::Graph {};

CudnnAttention::CudnnAttention(const CudnnHandle &handle) : handle(handle) {}
CudnnAttention::~CudnnAttention() = default;

std::unique_ptr<CudnnAttention> CudnnAttention::create(const CudnnHandle &, const AttentionSpec &, std::string &why) {
  why = "tec was built without cuDNN's frontend headers (pip package nvidia-cudnn-frontend)";
  return nullptr;
}

bool CudnnAttention::run(const AttentionOperands &, void *, std::string &error) const {
  error = "tec was built without cuDNN's frontend headers";
  return false;
}

#endif

} // namespace tec::kernels::cuda
