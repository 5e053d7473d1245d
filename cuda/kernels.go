package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/cuda/device"
)

// The kernels: .cu files embedded in the binary, each compiled by NVRTC into its own module. Each file
// lists its versions at the top (llm.c style); the launch parameters are documented where the Go side
// launches them (the op files).

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelFile is one .cu file and the extern "C" kernels it defines.
type kernelFile struct {
	file    string
	kernels []string
	// dev are the file's instruments for the tests (timing forms that skip a phase or count clock
	// cycles, an alternate decoder kept to compare against): defined under POTATO_DEV_KERNELS and
	// compiled and loaded only where devKernels is set, so a production backend carries only the kernels
	// it runs.
	dev []string
}

// devKernels compiles the kernel files with -DPOTATO_DEV_KERNELS and loads their dev kernels too. The
// package's tests set it (devkernels_test.go); nothing else does.
var devKernels bool

// loaded is the kernels the backend looks up in kf's module.
func (kf kernelFile) loaded() []string {
	if devKernels {
		return append(slices.Clone(kf.kernels), kf.dev...)
	}
	return kf.kernels
}

var kernelFiles = []kernelFile{
	{"elementwise.cu", []string{"k_round", "k_round4", "k_widen_bf16", "k_add", "k_add4", "k_add_sum", "k_add_sum4", "k_mul_sigmoid", "k_mul_sigmoid4", "k_mul_sigmoid4n", "k_situ", "k_slice", "k_gather", "k_gather4", "k_scatter_add", "k_copy16"}, nil},
	{"norm.cu", []string{"k_rmsnorm", "k_attnres", "k_rmsnorm2_w1_c1", "k_rmsnorm2_w1_c2", "k_rmsnorm2_w1_c4", "k_rmsnorm2_w1_c8",
		"k_rmsnorm2_w8_c1", "k_rmsnorm2_w8_c2", "k_rmsnorm2_w8_c4", "k_rmsnorm2_w8_c8", "k_rmsnorm2g_w1_c1", "k_rmsnorm2g_w1_c2", "k_rmsnorm2gb_w1_c1", "k_rmsnorm2gb_w1_c2",
		"k_attnres2_c1", "k_attnres2_c2", "k_attnres2_c4", "k_attnres2_c8",
		"k_attnres_norm2_c2_n0", "k_attnres_norm2_c4_n0", "k_attnres_norm2_c8_n0",
		"k_attnres_norm2_c1_n1", "k_attnres_norm2_c1_n2", "k_attnres_norm2_c1_n4", "k_attnres_norm2_c1_n8",
		"k_attnres_norm3_c2", "k_attnres_norm3_c4", "k_attnres_norm3_c8"}, nil},
	{"matmul.cu", []string{"k_matmul_f32", "k_matmul_bf16", "k_matmul_mxfp4"}, nil},
	{"matmul_tc.cu", []string{"k_matmul_tc_bf16", "k_matmul_tc_mxfp4", "k_matmul_tc_bf16_vec", "k_matmul_tc_mxfp4_vec"}, nil},
	{"experts.cu", []string{"k_experts_gather", "k_experts_gather8", "k_experts_gather8b", "k_experts_situ_tables", "k_experts_gateup", "k_experts_down", "k_experts_combine", "k_experts_combine4",
		"k_experts_decode", "k_experts_decode8", "k_experts_situ_rows", "k_experts_situ_rows8", "k_situ_glu_bf16"},
		[]string{"k_experts_gateup_f32", "k_experts_down_f32", "k_experts_gateup_nodec", "k_experts_down_nodec"}},
	{"experts_wg.cu", []string{"k_experts_gateup_wg", "k_experts_down_wg"}, []string{"k_experts_gateup_wg_nodec", "k_experts_down_wg_nodec"}},
	{"kda.cu", []string{"k_shortconv", "k_shortconv4", "k_shortconv4n", "k_shortconv4b", "k_kda_prep_exact", "k_kda_prep_fast",
		"k_kda_exact", "k_kda_exact_r32", "k_kda_exact_r64", "k_kda_exact_r128", "k_kda_fast_r64", "k_kda_fast_r128"}, nil},
	{"kda_chunk.cu", []string{"k_kda_chunk_r128", "k_kda_chunk_r64", "k_kda_chunk_r128n", "k_kda_chunk_r64n"}, []string{"k_kda_chunk_prof_r128"}},
	{"mla.cu", []string{"k_mla"}, nil},
	{"mla_tc.cu", []string{"k_mla_prep", "k_mla_shared_keys", "k_mla_tc_64_64", "k_mla_tc_128_128", "k_mla_tc_192_128"}, nil},
	{"mla_wg.cu", []string{"k_mla_wg_64_64", "k_mla_wg_128_128", "k_mla_wg_192_128"}, nil},
	{"route.cu", []string{"k_route_topk", "k_route_topk_v2"}, nil},
	{"tokenstats.cu", []string{"k_token_stats"}, nil},
	{"convert.cu", []string{"k_to_bf16", "k_to_bf16_v4"}, nil},
}

// nvrtcOptions are the options every kernel file is compiled with (the architecture is added per device).
// --fmad=false: no multiply-add contraction anywhere, so every product is rounded before its add as in
// the CPU backend (the kernels also write __fmul_rn / __fadd_rn where it matters). No --use_fast_math:
// division, square root and the double-precision exp/tanh/log stay IEEE-accurate.
var nvrtcOptions = []string{"--std=c++17", "--fmad=false", "-default-device"}

// compileOptions are nvrtcOptions, with the dev kernels' define where devKernels is set.
func compileOptions() []string {
	if devKernels {
		return append(slices.Clone(nvrtcOptions), "-DPOTATO_DEV_KERNELS")
	}
	return nvrtcOptions
}

// kernelSources reads the embedded files; every .cu file sees every .cuh header.
func kernelSources() ([]bind.Source, error) {
	headers := map[string]string{}
	hs, err := fs.Glob(kernelFS, "kernels/*.cuh")
	if err != nil {
		return nil, fmt.Errorf("%w: embedded headers: %w", ErrInternal, err)
	}
	for _, h := range hs {
		text, err := kernelFS.ReadFile(h)
		if err != nil {
			return nil, fmt.Errorf("%w: embedded %s: %w", ErrInternal, h, err)
		}
		headers[path.Base(h)] = string(text)
	}
	out := make([]bind.Source, len(kernelFiles))
	for i, kf := range kernelFiles {
		src, err := kernelFS.ReadFile("kernels/" + kf.file)
		if err != nil {
			return nil, fmt.Errorf("%w: embedded %s: %w", ErrInternal, kf.file, err)
		}
		out[i] = bind.Source{Name: kf.file, Text: string(src), Headers: headers}
	}
	return out, nil
}

// compileAll compiles (or reads from the kernel cache in dir) every kernel file for arch and returns the
// images by file name and how many came from the cache.
func compileAll(nv *bind.NVRTC, arch, dir string) (map[string][]byte, int, error) {
	srcs, err := kernelSources()
	if err != nil {
		return nil, 0, err
	}
	return device.CompileAll(nv, srcs, arch, compileOptions(), dir)
}

// compileKernels compiles the kernels for the backend's device, recording the cache statistics.
func (b *Backend) compileKernels(nv *bind.NVRTC) (map[string][]byte, error) {
	dir := b.opts.CacheDir
	if dir == "" {
		dir = device.CacheDir()
	}
	images, cached, err := compileAll(nv, b.info.Arch, dir)
	if err != nil {
		return nil, err
	}
	b.info.KernelsCached = cached
	b.info.KernelsCompiled = len(images) - cached
	return images, nil
}
