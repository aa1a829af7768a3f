#include "config/RunConfig.h"

#include <tuple>

namespace strata::config {

// Member-wise equality (C++17 has no defaulted operator==). A member added to a
// section must be added to its tie() here; the YAML round-trip test catches a miss
// only for keys the schema knows.
bool JobConfig::operator==(const JobConfig& o) const {
  return std::tie(name, trainingFolder) == std::tie(o.name, o.trainingFolder);
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return std::tie(nameOrPath, vaePath, clipPath, t5Path, tokenizerPath, textEncoderPath, distilled, vaeNormNumGroups,
                  clipNumAttentionHeads, isFlux, preset, numLayers, numSingleLayers, numAttentionHeads,
                  attentionHeadDim, inChannels, jointAttentionDim, pooledProjectionDim, axesDimsRope, guidanceEmbeds,
                  randomWeights, quantize, quantizeTe, qtype, fp8Matmul, fp8Backward, fp8KeepTranspose, lowVram, device,
                  splitModelOverGpus, splitModelOtherModuleParamCountScale, gpuIds, replicas, placement,
                  gpuMemoryLimitGb, memoryReserveGb, attentionBackend) ==
             std::tie(o.nameOrPath, o.vaePath, o.clipPath, o.t5Path, o.tokenizerPath, o.textEncoderPath, o.distilled,
                      o.vaeNormNumGroups, o.clipNumAttentionHeads, o.isFlux, o.preset, o.numLayers, o.numSingleLayers,
                      o.numAttentionHeads, o.attentionHeadDim, o.inChannels, o.jointAttentionDim, o.pooledProjectionDim,
                      o.axesDimsRope, o.guidanceEmbeds, o.randomWeights, o.quantize, o.quantizeTe, o.qtype, o.fp8Matmul,
                      o.fp8Backward, o.fp8KeepTranspose, o.lowVram, o.device, o.splitModelOverGpus,
                      o.splitModelOtherModuleParamCountScale, o.gpuIds, o.replicas, o.placement, o.gpuMemoryLimitGb,
                      o.memoryReserveGb, o.attentionBackend) &&
         arch == o.arch;
}

bool NetworkConfig::operator==(const NetworkConfig& o) const {
  return std::tie(type, linear, linearAlpha, dropout, targetModules, dtype) ==
         std::tie(o.type, o.linear, o.linearAlpha, o.dropout, o.targetModules, o.dtype);
}

bool EmaConfig::operator==(const EmaConfig& o) const {
  return std::tie(useEma, emaDecay, updateEvery) == std::tie(o.useEma, o.emaDecay, o.updateEvery);
}

bool TrainConfig::operator==(const TrainConfig& o) const {
  return std::tie(steps, batchSize, gradientAccumulationSteps, lr, lrScheduler, lrWarmupSteps, optimizer, weightDecay,
                  betas, eps, maxGradNorm, dtype, gradientCheckpointing, gradientCheckpointingAuto, offloadCheckpoints,
                  offloadOptimizerState, offloadOptimizerStateAuto, cudaGraph, timestepType, guidance,
                  captionDropoutRate, seed,
                  ema) == std::tie(o.steps, o.batchSize, o.gradientAccumulationSteps, o.lr, o.lrScheduler,
                                   o.lrWarmupSteps, o.optimizer, o.weightDecay, o.betas, o.eps, o.maxGradNorm, o.dtype,
                                   o.gradientCheckpointing, o.gradientCheckpointingAuto, o.offloadCheckpoints,
                                   o.offloadOptimizerState, o.offloadOptimizerStateAuto, o.cudaGraph, o.timestepType,
                                   o.guidance, o.captionDropoutRate, o.seed, o.ema);
}

bool DatasetConfig::operator==(const DatasetConfig& o) const {
  return std::tie(type, folderPath, captionExt, defaultCaption, triggerWord, numRepeats, flipX, resolution, numItems,
                  cacheLatentsToDisk) == std::tie(o.type, o.folderPath, o.captionExt, o.defaultCaption, o.triggerWord,
                                                  o.numRepeats, o.flipX, o.resolution, o.numItems,
                                                  o.cacheLatentsToDisk) &&
         std::tie(filePath, promptField, responseField, textField, responseMarker, maxSeqLen, paddingSide, packing) ==
             std::tie(o.filePath, o.promptField, o.responseField, o.textField, o.responseMarker, o.maxSeqLen,
                      o.paddingSide, o.packing) &&
         familyValues == o.familyValues;
}

bool SampleConfig::operator==(const SampleConfig& o) const {
  return std::tie(sampleEvery, prompts, seed, walkSeed, width, height, sampleSteps, guidanceScale) ==
             std::tie(o.sampleEvery, o.prompts, o.seed, o.walkSeed, o.width, o.height, o.sampleSteps,
                      o.guidanceScale) &&
         std::tie(maxNewTokens, temperature) == std::tie(o.maxNewTokens, o.temperature);
}

bool SaveConfig::operator==(const SaveConfig& o) const {
  return std::tie(saveEvery, maxStepSavesToKeep, exportEvery, dtype, exportFormats) ==
         std::tie(o.saveEvery, o.maxStepSavesToKeep, o.exportEvery, o.dtype, o.exportFormats);
}

bool RunConfig::operator==(const RunConfig& o) const {
  return std::tie(job, model, network, train, datasets, sample, save, familyValues) ==
         std::tie(o.job, o.model, o.network, o.train, o.datasets, o.sample, o.save, o.familyValues);
}

}  // namespace strata::config
