"""The node agent's feature gates: the spec's list, each with its stage and default.

The mechanism (parsing, AllAlpha/AllBeta, locked and GA gates, warnings) is
shared with the API server in :mod:`apiserver_min.api.featuregates`; this module
holds the agent's table and binds it as the default, so the effective
configuration reads ``cfg.feature_gates.enabled("SeccompDefault")``.
"""

from __future__ import annotations

import types
from typing import Iterable, Mapping

from apiserver_min.api import featuregates as _shared
from apiserver_min.api.featuregates import FeatureGateError, GateSpec, Stage, parse_gate_list

__all__ = [
    "Stage",
    "GateSpec",
    "FeatureGateError",
    "KNOWN_GATES",
    "FeatureGates",
    "parse_gate_list",
    "describe_known",
]


def _table() -> dict[str, GateSpec]:
    beta_on = (
        "APIListChunking APIPriorityAndFairness APIResponseCompression APIServerIdentity "
        "AnyVolumeDataSource AppArmor CPUManagerPolicyBetaOptions CPUManagerPolicyOptions "
        "CSINodeExpandSecret CronJobTimeZone CustomResourceValidationExpressions "
        "DownwardAPIHugePages ExpandedDNSConfig GRPCContainerProbe GracefulNodeShutdown "
        "GracefulNodeShutdownBasedOnPodPriority JobMutableNodeSchedulingDirectives "
        "JobPodFailurePolicy JobReadyPods KubeletPodResources KubeletPodResourcesGetAllocatable "
        "LogarithmicScaleDown LoggingBetaOptions MemoryManager NodeInclusionPolicyInPodTopologySpread "
        "NodeOutOfServiceVolumeDetach OpenAPIEnums OpenAPIV3 PodDeletionCost PodDisruptionConditions "
        "ProbeTerminationGracePeriod ProxyTerminatingEndpoints RemainingItemCount "
        "RetroactiveDefaultStorageClass RotateKubeletServerCertificate SeccompDefault "
        "ServerSideFieldValidation SizeMemoryBackedVolumes StorageVersionHash TopologyAwareHints "
        "TopologyManager WinOverlay"
    )
    beta_off = (
        "AllBeta CSIMigrationPortworx ExperimentalHostUserNamespaceDefaulting "
        "MinDomainsInPodTopologySpread TopologyManagerPolicyBetaOptions"
    )
    alpha_on = "WindowsHostNetwork"
    alpha_off = (
        "APISelfSubjectReview APIServerTracing AggregatedDiscoveryEndpoint AllAlpha "
        "CPUManagerPolicyAlphaOptions CSIMigrationRBD CSIVolumeHealth ComponentSLIs "
        "ContainerCheckpoint ContextualLogging CrossNamespaceVolumeDataSource "
        "CustomCPUCFSQuotaPeriod DisableCloudProviders DisableKubeletCloudCredentialProviders "
        "DynamicResourceAllocation EventedPLEG HPAContainerMetrics HPAScaleToZero "
        "HonorPVReclaimPolicy IPTablesOwnershipCleanup "
        "InTreePluginAWSUnregister InTreePluginAzureDiskUnregister InTreePluginAzureFileUnregister "
        "InTreePluginGCEUnregister InTreePluginOpenStackUnregister InTreePluginPortworxUnregister "
        "InTreePluginRBDUnregister InTreePluginvSphereUnregister "
        "KMSv2 KubeletInUserNamespace KubeletTracing LegacyServiceAccountTokenTracking "
        "LocalStorageCapacityIsolationFSQuotaMonitoring LoggingAlphaOptions "
        "MatchLabelKeysInPodTopologySpread MaxUnavailableStatefulSet MemoryQoS "
        "MinimizeIPTablesRestore MultiCIDRRangeAllocator NetworkPolicyStatus NodeSwap "
        "PDBUnhealthyPodEvictionPolicy PodAndContainerStatsFromCRI PodHasNetworkCondition "
        "PodSchedulingReadiness ProcMountType QOSReserved ReadWriteOncePod "
        "RecoverVolumeExpansionFailure SELinuxMountReadWriteOncePod StatefulSetAutoDeletePVC "
        "StatefulSetStartOrdinal StorageVersionAPI TopologyManagerPolicyAlphaOptions "
        "TopologyManagerPolicyOptions UserNamespacesStatelessPodsSupport "
        "ValidatingAdmissionPolicy VolumeCapacityPriority WinDSR"
    )
    # Not in the spec's list (which names only alpha and beta gates), but known to
    # operators' existing flag lines: gates that graduated to GA in the same era.
    # They are accepted with a warning (rule 9) and locked on, as upstream does.
    ga_locked = (
        "CSIInlineVolume CSIMigration DelegateFSGroupToCSIDriver DevicePlugins DryRun "
        "EphemeralContainers ExpandCSIVolumes ExpandInUsePersistentVolumes "
        "ExpandPersistentVolumes KubeletCredentialProviders LocalStorageCapacityIsolation "
        "PodSecurity WindowsHostProcessContainers"
    )
    ga_unlocked = "ExecProbeTimeout"  # GA but still switchable, for slow exec probes
    table: dict[str, GateSpec] = {}
    for names, spec in (
        (beta_on, GateSpec(Stage.BETA, True)),
        (beta_off, GateSpec(Stage.BETA, False)),
        (alpha_on, GateSpec(Stage.ALPHA, True)),
        (alpha_off, GateSpec(Stage.ALPHA, False)),
        (ga_locked, GateSpec(Stage.GA, True, locked=True)),
        (ga_unlocked, GateSpec(Stage.GA, True)),
    ):
        for name in names.split():
            assert name not in table, name
            table[name] = spec
    return table


KNOWN_GATES: Mapping[str, GateSpec] = types.MappingProxyType(_table())


class FeatureGates(_shared.FeatureGates):
    """Feature gates over the node agent's table unless another is given."""

    __slots__ = ()

    def __init__(self, explicit: Mapping[str, bool] | None = None, known: Mapping[str, GateSpec] = KNOWN_GATES) -> None:
        super().__init__(explicit, known)

    @classmethod
    def parse(cls, text: str, known: Mapping[str, GateSpec] = KNOWN_GATES) -> "FeatureGates":
        return cls(parse_gate_list(text), known)


def describe_known(known: Mapping[str, GateSpec] = KNOWN_GATES) -> Iterable[str]:
    return _shared.describe_known(known)
