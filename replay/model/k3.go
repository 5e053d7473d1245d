package model

// K3TextConfig returns text_config as released with Kimi K3 (K3_SPEC.md section 1). Synthetic presets start
// from it and scale the dimensions down; the full-shape preset uses it as is.
func K3TextConfig() TextConfig {
	const layers = 93
	var kda, full []int
	for l := 1; l <= layers; l++ { // 1-indexed: every fourth layer and the last are full attention
		if l%4 == 0 || l == layers {
			full = append(full, l)
		} else {
			kda = append(kda, l)
		}
	}
	return TextConfig{
		ModelType: "kimi_linear", HiddenSize: 7168, NumHiddenLayers: layers, VocabSize: 163840,
		RMSNormEps: 1e-5, NumAttentionHeads: 96, NumKeyValueHeads: 96,
		QLoraRank: 1536, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
		MLAUseNope: true, MLAUseOutputGate: true,
		LinearAttn: LinearAttnConfig{
			HeadDim: 128, NumHeads: 96, ShortConvKernelSize: 4, UseFullRankGate: true, GateLowerBound: -5,
			KDALayers: kda, FullAttnLayers: full,
		},
		IntermediateSize: 33792, FirstKDenseReplace: 1, MoELayerFreq: 1,
		NumExperts: 896, NumExpertsPerToken: 16, NumSharedExperts: 2,
		MoEIntermediateSize: 3072, RoutedExpertHidden: 3584, LatentMoEUseNorm: true,
		RouterActivation: "sigmoid", MoERenormalize: true, RoutedScalingFactor: 1.0,
		TopKMethod: "noaux_tc", NumExpertGroup: 1, TopKGroup: 1,
		HiddenAct: "situ", SiTUBeta: 4.0, SiTULinearBeta: 25.0, AttnResBlockSize: 12,
		TieWordEmbeddings: false, NumNextNPredict: 0,
		BOSTokenID: 163584, EOSTokenID: 163586, PadTokenID: 163839, RopeTheta: 50000,
	}
}
