"""The core group (``v1``): message package ``k8s.io.api.core.v1``.

Field numbers, pointer-ness, list and patch markers follow upstream v1.27.
"""

from __future__ import annotations

from ..schema import CONDITION, LABEL_SELECTOR, OBJECT_META, Field, List, Map, Struct
from ._common import (
    BOOL,
    BYTES,
    I32,
    I64,
    IOS,
    MICROTIME,
    QTY,
    RESOURCE_LIST,
    STR,
    STR_ATOMIC,
    STR_LIST,
    STR_MAP,
    STR_MAP_ATOMIC,
    TIME,
    F,
    enum,
    inline,
    map_list,
    merge_list,
    ptr,
    req,
    struct,
)

PKG = "k8s.io.api.core.v1"
S = struct(PKG)

PROTOCOL = enum("SCTP", "TCP", "UDP")
CONDITION_STATUS = STR  # "True" | "False" | "Unknown" (not an upstream enum)

# --- references ------------------------------------------------------------------------------

LocalObjectReference = S(
    "LocalObjectReference",
    [
        F("name", STR, 1),
    ],
    atomic=True,
)

ObjectReference = S(
    "ObjectReference",
    [
        F("kind", STR, 1),
        F("namespace", STR, 2),
        F("name", STR, 3),
        F("uid", STR, 4),
        F("apiVersion", STR, 5),
        F("resourceVersion", STR, 6),
        F("fieldPath", STR, 7),
    ],
    atomic=True,
)

SecretReference = S(
    "SecretReference",
    [
        F("name", STR, 1),
        F("namespace", STR, 2),
    ],
    atomic=True,
)

TypedLocalObjectReference = S(
    "TypedLocalObjectReference",
    [
        ptr("apiGroup", STR, 1),
        req("kind", STR, 2),
        req("name", STR, 3),
    ],
    atomic=True,
)

TypedObjectReference = S(
    "TypedObjectReference",
    [
        ptr("apiGroup", STR, 1),
        req("kind", STR, 2),
        req("name", STR, 3),
        ptr("namespace", STR, 4),
    ],
)

# --- volume sources --------------------------------------------------------------------------

KeyToPath = S(
    "KeyToPath",
    [
        req("key", STR, 1),
        req("path", STR, 2),
        ptr("mode", I32, 3),
    ],
)

HostPathVolumeSource = S(
    "HostPathVolumeSource",
    [
        req("path", STR, 1),
        ptr(
            "type",
            enum("", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"),
            2,
        ),
    ],
)

EmptyDirVolumeSource = S(
    "EmptyDirVolumeSource",
    [
        F("medium", STR, 1),
        ptr("sizeLimit", QTY, 2),
    ],
)

GCEPersistentDiskVolumeSource = S(
    "GCEPersistentDiskVolumeSource",
    [
        req("pdName", STR, 1),
        F("fsType", STR, 2),
        F("partition", I32, 3),
        F("readOnly", BOOL, 4),
    ],
)

AWSElasticBlockStoreVolumeSource = S(
    "AWSElasticBlockStoreVolumeSource",
    [
        req("volumeID", STR, 1),
        F("fsType", STR, 2),
        F("partition", I32, 3),
        F("readOnly", BOOL, 4),
    ],
)

GitRepoVolumeSource = S(
    "GitRepoVolumeSource",
    [
        req("repository", STR, 1),
        F("revision", STR, 2),
        F("directory", STR, 3),
    ],
)

SecretVolumeSource = S(
    "SecretVolumeSource",
    [
        F("secretName", STR, 1),
        F("items", List(KeyToPath), 2),
        ptr("defaultMode", I32, 3),
        ptr("optional", BOOL, 4),
    ],
)

NFSVolumeSource = S(
    "NFSVolumeSource",
    [
        req("server", STR, 1),
        req("path", STR, 2),
        F("readOnly", BOOL, 3),
    ],
)


def _iscsi_fields(secret_ref: Struct) -> list[Field]:
    """The fields of both iSCSI sources: they differ only in the secret reference's type."""
    return [
        req("targetPortal", STR, 1),
        req("iqn", STR, 2),
        req("lun", I32, 3),
        F("iscsiInterface", STR, 4),
        F("fsType", STR, 5),
        F("readOnly", BOOL, 6),
        F("portals", STR_LIST, 7),
        F("chapAuthDiscovery", BOOL, 8),
        F("chapAuthSession", BOOL, 11),
        ptr("secretRef", secret_ref, 10),
        ptr("initiatorName", STR, 12),
    ]


ISCSIVolumeSource = S("ISCSIVolumeSource", _iscsi_fields(LocalObjectReference))
ISCSIPersistentVolumeSource = S("ISCSIPersistentVolumeSource", _iscsi_fields(SecretReference))

GlusterfsVolumeSource = S(
    "GlusterfsVolumeSource",
    [
        req("endpoints", STR, 1),
        req("path", STR, 2),
        F("readOnly", BOOL, 3),
    ],
)

GlusterfsPersistentVolumeSource = S(
    "GlusterfsPersistentVolumeSource",
    [
        req("endpoints", STR, 1),
        req("path", STR, 2),
        F("readOnly", BOOL, 3),
        ptr("endpointsNamespace", STR, 4),
    ],
)

PersistentVolumeClaimVolumeSource = S(
    "PersistentVolumeClaimVolumeSource",
    [
        req("claimName", STR, 1),
        F("readOnly", BOOL, 2),
    ],
)


def _rbd(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            req("monitors", STR_LIST, 1),
            req("image", STR, 2),
            F("fsType", STR, 3),
            F("pool", STR, 4),
            F("user", STR, 5),
            F("keyring", STR, 6),
            ptr("secretRef", secret_ref, 7),
            F("readOnly", BOOL, 8),
        ],
    )


RBDVolumeSource = _rbd("RBDVolumeSource", LocalObjectReference)
RBDPersistentVolumeSource = _rbd("RBDPersistentVolumeSource", SecretReference)


def _flex(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            req("driver", STR, 1),
            F("fsType", STR, 2),
            ptr("secretRef", secret_ref, 3),
            F("readOnly", BOOL, 4),
            F("options", STR_MAP, 5),
        ],
    )


FlexVolumeSource = _flex("FlexVolumeSource", LocalObjectReference)
FlexPersistentVolumeSource = _flex("FlexPersistentVolumeSource", SecretReference)


def _cinder(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            req("volumeID", STR, 1),
            F("fsType", STR, 2),
            F("readOnly", BOOL, 3),
            ptr("secretRef", secret_ref, 4),
        ],
    )


CinderVolumeSource = _cinder("CinderVolumeSource", LocalObjectReference)
CinderPersistentVolumeSource = _cinder("CinderPersistentVolumeSource", SecretReference)


def _cephfs(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            req("monitors", STR_LIST, 1),
            F("path", STR, 2),
            F("user", STR, 3),
            F("secretFile", STR, 4),
            ptr("secretRef", secret_ref, 5),
            F("readOnly", BOOL, 6),
        ],
    )


CephFSVolumeSource = _cephfs("CephFSVolumeSource", LocalObjectReference)
CephFSPersistentVolumeSource = _cephfs("CephFSPersistentVolumeSource", SecretReference)

FlockerVolumeSource = S(
    "FlockerVolumeSource",
    [
        F("datasetName", STR, 1),
        F("datasetUUID", STR, 2),
    ],
)

ObjectFieldSelector = S(
    "ObjectFieldSelector",
    [
        F("apiVersion", STR, 1),
        req("fieldPath", STR, 2),
    ],
    atomic=True,
)

ResourceFieldSelector = S(
    "ResourceFieldSelector",
    [
        F("containerName", STR, 1),
        req("resource", STR, 2),
        F("divisor", QTY, 3),
    ],
    atomic=True,
)

DownwardAPIVolumeFile = S(
    "DownwardAPIVolumeFile",
    [
        req("path", STR, 1),
        ptr("fieldRef", ObjectFieldSelector, 2),
        ptr("resourceFieldRef", ResourceFieldSelector, 3),
        ptr("mode", I32, 4),
    ],
)

DownwardAPIVolumeSource = S(
    "DownwardAPIVolumeSource",
    [
        F("items", List(DownwardAPIVolumeFile), 1),
        ptr("defaultMode", I32, 2),
    ],
)

FCVolumeSource = S(
    "FCVolumeSource",
    [
        F("targetWWNs", STR_LIST, 1),
        ptr("lun", I32, 2),
        F("fsType", STR, 3),
        F("readOnly", BOOL, 4),
        F("wwids", STR_LIST, 5),
    ],
)

AzureFileVolumeSource = S(
    "AzureFileVolumeSource",
    [
        req("secretName", STR, 1),
        req("shareName", STR, 2),
        F("readOnly", BOOL, 3),
    ],
)

AzureFilePersistentVolumeSource = S(
    "AzureFilePersistentVolumeSource",
    [
        req("secretName", STR, 1),
        req("shareName", STR, 2),
        F("readOnly", BOOL, 3),
        ptr("secretNamespace", STR, 4),
    ],
)

ConfigMapVolumeSource = S(
    "ConfigMapVolumeSource",
    [
        inline(LocalObjectReference, 1),
        F("items", List(KeyToPath), 2),
        ptr("defaultMode", I32, 3),
        ptr("optional", BOOL, 4),
    ],
)

VsphereVirtualDiskVolumeSource = S(
    "VsphereVirtualDiskVolumeSource",
    [
        req("volumePath", STR, 1),
        F("fsType", STR, 2),
        F("storagePolicyName", STR, 3),
        F("storagePolicyID", STR, 4),
    ],
)

QuobyteVolumeSource = S(
    "QuobyteVolumeSource",
    [
        req("registry", STR, 1),
        req("volume", STR, 2),
        F("readOnly", BOOL, 3),
        F("user", STR, 4),
        F("group", STR, 5),
        F("tenant", STR, 6),
    ],
)

AzureDiskVolumeSource = S(
    "AzureDiskVolumeSource",
    [
        req("diskName", STR, 1),
        req("diskURI", STR, 2),
        ptr("cachingMode", enum("None", "ReadOnly", "ReadWrite"), 3),
        ptr("fsType", STR, 4),
        ptr("readOnly", BOOL, 5),
        ptr("kind", enum("Dedicated", "Managed", "Shared"), 6),
    ],
)

PhotonPersistentDiskVolumeSource = S(
    "PhotonPersistentDiskVolumeSource",
    [
        req("pdID", STR, 1),
        F("fsType", STR, 2),
    ],
)

PortworxVolumeSource = S(
    "PortworxVolumeSource",
    [
        req("volumeID", STR, 1),
        F("fsType", STR, 2),
        F("readOnly", BOOL, 3),
    ],
)


def _scaleio(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            req("gateway", STR, 1),
            req("system", STR, 2),
            ptr("secretRef", secret_ref, 3, required=True),
            F("sslEnabled", BOOL, 4),
            F("protectionDomain", STR, 5),
            F("storagePool", STR, 6),
            F("storageMode", STR, 7),
            F("volumeName", STR, 8),
            F("fsType", STR, 9),
            F("readOnly", BOOL, 10),
        ],
    )


ScaleIOVolumeSource = _scaleio("ScaleIOVolumeSource", LocalObjectReference)
ScaleIOPersistentVolumeSource = _scaleio("ScaleIOPersistentVolumeSource", SecretReference)


def _storageos(name: str, secret_ref: Struct) -> Struct:
    return S(
        name,
        [
            F("volumeName", STR, 1),
            F("volumeNamespace", STR, 2),
            F("fsType", STR, 3),
            F("readOnly", BOOL, 4),
            ptr("secretRef", secret_ref, 5),
        ],
    )


StorageOSVolumeSource = _storageos("StorageOSVolumeSource", LocalObjectReference)
StorageOSPersistentVolumeSource = _storageos("StorageOSPersistentVolumeSource", ObjectReference)

SecretProjection = S(
    "SecretProjection",
    [
        inline(LocalObjectReference, 1),
        F("items", List(KeyToPath), 2),
        ptr("optional", BOOL, 4),
    ],
)

DownwardAPIProjection = S(
    "DownwardAPIProjection",
    [
        F("items", List(DownwardAPIVolumeFile), 1),
    ],
)

ConfigMapProjection = S(
    "ConfigMapProjection",
    [
        inline(LocalObjectReference, 1),
        F("items", List(KeyToPath), 2),
        ptr("optional", BOOL, 4),
    ],
)

ServiceAccountTokenProjection = S(
    "ServiceAccountTokenProjection",
    [
        F("audience", STR, 1),
        ptr("expirationSeconds", I64, 2),
        req("path", STR, 3),
    ],
)

VolumeProjection = S(
    "VolumeProjection",
    [
        ptr("secret", SecretProjection, 1),
        ptr("downwardAPI", DownwardAPIProjection, 2),
        ptr("configMap", ConfigMapProjection, 3),
        ptr("serviceAccountToken", ServiceAccountTokenProjection, 4),
    ],
)

ProjectedVolumeSource = S(
    "ProjectedVolumeSource",
    [
        F("sources", List(VolumeProjection), 1),
        ptr("defaultMode", I32, 2),
    ],
)

LocalVolumeSource = S(
    "LocalVolumeSource",
    [
        req("path", STR, 1),
        ptr("fsType", STR, 2),
    ],
)

CSIPersistentVolumeSource = S(
    "CSIPersistentVolumeSource",
    [
        req("driver", STR, 1),
        req("volumeHandle", STR, 2),
        F("readOnly", BOOL, 3),
        F("fsType", STR, 4),
        F("volumeAttributes", STR_MAP, 5),
        ptr("controllerPublishSecretRef", SecretReference, 6),
        ptr("nodeStageSecretRef", SecretReference, 7),
        ptr("nodePublishSecretRef", SecretReference, 8),
        ptr("controllerExpandSecretRef", SecretReference, 9),
        ptr("nodeExpandSecretRef", SecretReference, 10),
    ],
)

CSIVolumeSource = S(
    "CSIVolumeSource",
    [
        req("driver", STR, 1),
        ptr("readOnly", BOOL, 2),
        ptr("fsType", STR, 3),
        F("volumeAttributes", STR_MAP, 4),
        ptr("nodePublishSecretRef", LocalObjectReference, 5),
    ],
)

# --- persistent volume claims (also used by ephemeral volumes) -------------------------------

ResourceClaim = S(
    "ResourceClaim",
    [
        req("name", STR, 1),
    ],
)

ResourceRequirements = S(
    "ResourceRequirements",
    [
        F("limits", RESOURCE_LIST, 1, description="The most of each resource the container may use."),
        F(
            "requests",
            RESOURCE_LIST,
            2,
            description="The amount of each resource the container is guaranteed; defaults to the limits.",
        ),
        # Upstream marks this feature-gated (DynamicResourceAllocation) list keyed by name.
        F("claims", map_list(ResourceClaim, "name"), 3),
    ],
)

ACCESS_MODE = enum("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
VOLUME_MODE = enum("Block", "Filesystem")

PersistentVolumeClaimSpec = S(
    "PersistentVolumeClaimSpec",
    [
        F("accessModes", List(ACCESS_MODE), 1),
        ptr("selector", LABEL_SELECTOR, 4),
        F("resources", ResourceRequirements, 2),
        F("volumeName", STR, 3),
        ptr("storageClassName", STR, 5),
        ptr("volumeMode", VOLUME_MODE, 6),
        ptr("dataSource", TypedLocalObjectReference, 7),
        ptr("dataSourceRef", TypedObjectReference, 8),
    ],
)

PersistentVolumeClaimTemplate = S(
    "PersistentVolumeClaimTemplate",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", PersistentVolumeClaimSpec, 2),
    ],
)

EphemeralVolumeSource = S(
    "EphemeralVolumeSource",
    [
        ptr("volumeClaimTemplate", PersistentVolumeClaimTemplate, 1),
    ],
)

VolumeSource = S(
    "VolumeSource",
    [
        ptr("hostPath", HostPathVolumeSource, 1),
        ptr("emptyDir", EmptyDirVolumeSource, 2),
        ptr("gcePersistentDisk", GCEPersistentDiskVolumeSource, 3),
        ptr("awsElasticBlockStore", AWSElasticBlockStoreVolumeSource, 4),
        ptr("gitRepo", GitRepoVolumeSource, 5),
        ptr("secret", SecretVolumeSource, 6),
        ptr("nfs", NFSVolumeSource, 7),
        ptr("iscsi", ISCSIVolumeSource, 8),
        ptr("glusterfs", GlusterfsVolumeSource, 9),
        ptr("persistentVolumeClaim", PersistentVolumeClaimVolumeSource, 10),
        ptr("rbd", RBDVolumeSource, 11),
        ptr("flexVolume", FlexVolumeSource, 12),
        ptr("cinder", CinderVolumeSource, 13),
        ptr("cephfs", CephFSVolumeSource, 14),
        ptr("flocker", FlockerVolumeSource, 15),
        ptr("downwardAPI", DownwardAPIVolumeSource, 16),
        ptr("fc", FCVolumeSource, 17),
        ptr("azureFile", AzureFileVolumeSource, 18),
        ptr("configMap", ConfigMapVolumeSource, 19),
        ptr("vsphereVolume", VsphereVirtualDiskVolumeSource, 20),
        ptr("quobyte", QuobyteVolumeSource, 21),
        ptr("azureDisk", AzureDiskVolumeSource, 22),
        ptr("photonPersistentDisk", PhotonPersistentDiskVolumeSource, 23),
        ptr("portworxVolume", PortworxVolumeSource, 24),
        ptr("scaleIO", ScaleIOVolumeSource, 25),
        ptr("projected", ProjectedVolumeSource, 26),
        ptr("storageos", StorageOSVolumeSource, 27),
        ptr("csi", CSIVolumeSource, 28),
        ptr("ephemeral", EphemeralVolumeSource, 29),
    ],
)

Volume = S(
    "Volume",
    [
        req("name", STR, 1, description="Name of the volume, unique within the pod."),
        inline(VolumeSource, 2),
    ],
)

# --- containers ------------------------------------------------------------------------------

ContainerPort = S(
    "ContainerPort",
    [
        F(
            "name",
            STR,
            1,
            description="A name for the port, unique within the pod (IANA service name), that services can refer to.",
        ),
        F("hostPort", I32, 2, description="Port number to expose on the host; most containers do not need it."),
        req("containerPort", I32, 3, description="Port number on the pod's IP address (1-65535)."),
        F("protocol", PROTOCOL, 4, default="TCP", description="Protocol of the port. Defaults to TCP."),
        F("hostIP", STR, 5, description="Host IP to bind the host port to."),
    ],
)

VolumeMount = S(
    "VolumeMount",
    [
        req("name", STR, 1, description="Name of the pod volume to mount."),
        F("readOnly", BOOL, 2, description="Mount read-only."),
        req("mountPath", STR, 3, description="Path inside the container to mount the volume at."),
        F("subPath", STR, 4, description="Path inside the volume to mount instead of its root."),
        ptr("mountPropagation", enum("Bidirectional", "HostToContainer", "None"), 5),
        F("subPathExpr", STR, 6),
    ],
)

VolumeDevice = S(
    "VolumeDevice",
    [
        req("name", STR, 1),
        req("devicePath", STR, 2),
    ],
)

ConfigMapKeySelector = S(
    "ConfigMapKeySelector",
    [
        inline(LocalObjectReference, 1),
        req("key", STR, 2),
        ptr("optional", BOOL, 3),
    ],
    atomic=True,
)

SecretKeySelector = S(
    "SecretKeySelector",
    [
        inline(LocalObjectReference, 1),
        req("key", STR, 2),
        ptr("optional", BOOL, 3),
    ],
    atomic=True,
)

EnvVarSource = S(
    "EnvVarSource",
    [
        ptr("fieldRef", ObjectFieldSelector, 1),
        ptr("resourceFieldRef", ResourceFieldSelector, 2),
        ptr("configMapKeyRef", ConfigMapKeySelector, 3),
        ptr("secretKeyRef", SecretKeySelector, 4),
    ],
)

EnvVar = S(
    "EnvVar",
    [
        req("name", STR, 1, description="Name of the environment variable."),
        F("value", STR, 2, description="The value; $(VAR) references to earlier variables are expanded."),
        ptr("valueFrom", EnvVarSource, 3, description="Source of the value when value is empty."),
    ],
)

ConfigMapEnvSource = S(
    "ConfigMapEnvSource",
    [
        inline(LocalObjectReference, 1),
        ptr("optional", BOOL, 2),
    ],
)

SecretEnvSource = S(
    "SecretEnvSource",
    [
        inline(LocalObjectReference, 1),
        ptr("optional", BOOL, 2),
    ],
)

EnvFromSource = S(
    "EnvFromSource",
    [
        F("prefix", STR, 1),
        ptr("configMapRef", ConfigMapEnvSource, 2),
        ptr("secretRef", SecretEnvSource, 3),
    ],
)

HTTPHeader = S(
    "HTTPHeader",
    [
        req("name", STR, 1),
        req("value", STR, 2),
    ],
)

HTTPGetAction = S(
    "HTTPGetAction",
    [
        F("path", STR, 1),
        req("port", IOS, 2),
        F("host", STR, 3),
        F("scheme", enum("HTTP", "HTTPS"), 4),
        F("httpHeaders", List(HTTPHeader), 5),
    ],
)

TCPSocketAction = S(
    "TCPSocketAction",
    [
        req("port", IOS, 1),
        F("host", STR, 2),
    ],
)

GRPCAction = S(
    "GRPCAction",
    [
        req("port", I32, 1),
        ptr("service", STR, 2, default=""),
    ],
)

ExecAction = S(
    "ExecAction",
    [
        F("command", STR_LIST, 1),
    ],
)

ProbeHandler = S(
    "ProbeHandler",
    [
        ptr("exec", ExecAction, 1),
        ptr("httpGet", HTTPGetAction, 2),
        ptr("tcpSocket", TCPSocketAction, 3),
        ptr("grpc", GRPCAction, 4),
    ],
)

Probe = S(
    "Probe",
    [
        inline(ProbeHandler, 1),
        F("initialDelaySeconds", I32, 2),
        F("timeoutSeconds", I32, 3),
        F("periodSeconds", I32, 4),
        F("successThreshold", I32, 5),
        F("failureThreshold", I32, 6),
        ptr("terminationGracePeriodSeconds", I64, 7),
    ],
)

LifecycleHandler = S(
    "LifecycleHandler",
    [
        ptr("exec", ExecAction, 1),
        ptr("httpGet", HTTPGetAction, 2),
        ptr("tcpSocket", TCPSocketAction, 3),
    ],
)

Lifecycle = S(
    "Lifecycle",
    [
        ptr("postStart", LifecycleHandler, 1),
        ptr("preStop", LifecycleHandler, 2),
    ],
)

Capabilities = S(
    "Capabilities",
    [
        F("add", STR_LIST, 1),
        F("drop", STR_LIST, 2),
    ],
)

# ContainerResizePolicy and Container.resizePolicy are new in v1.27 (InPlacePodVerticalScaling).
ContainerResizePolicy = S(
    "ContainerResizePolicy",
    [
        req("resourceName", STR, 1),
        req("restartPolicy", enum("NotRequired", "RestartContainer"), 2),
    ],
)

SELinuxOptions = S(
    "SELinuxOptions",
    [
        F("user", STR, 1),
        F("role", STR, 2),
        F("type", STR, 3),
        F("level", STR, 4),
    ],
)

WindowsSecurityContextOptions = S(
    "WindowsSecurityContextOptions",
    [
        ptr("gmsaCredentialSpecName", STR, 1),
        ptr("gmsaCredentialSpec", STR, 2),
        ptr("runAsUserName", STR, 3),
        ptr("hostProcess", BOOL, 4),
    ],
)

SeccompProfile = S(
    "SeccompProfile",
    [
        req("type", enum("Localhost", "RuntimeDefault", "Unconfined"), 1),
        ptr("localhostProfile", STR, 2),
    ],
)

SecurityContext = S(
    "SecurityContext",
    [
        ptr("capabilities", Capabilities, 1),
        ptr("privileged", BOOL, 2),
        ptr("seLinuxOptions", SELinuxOptions, 3),
        ptr("windowsOptions", WindowsSecurityContextOptions, 10),
        ptr("runAsUser", I64, 4),
        ptr("runAsGroup", I64, 8),
        ptr("runAsNonRoot", BOOL, 5),
        ptr("readOnlyRootFilesystem", BOOL, 6),
        ptr("allowPrivilegeEscalation", BOOL, 7),
        ptr("procMount", enum("Default", "Unmasked"), 9),
        ptr("seccompProfile", SeccompProfile, 11),
    ],
)

PULL_POLICY = enum("Always", "IfNotPresent", "Never")
TERMINATION_MESSAGE_POLICY = enum("FallbackToLogsOnError", "File")


def _container_fields() -> list:
    """Container and EphemeralContainerCommon share their fields, numbers and words."""
    return [
        req(
            "name",
            STR,
            1,
            description=("Name of the container, unique within the pod (a DNS label). Cannot be updated."),
        ),
        F("image", STR, 2, description=("Container image name.")),
        F(
            "command",
            STR_LIST,
            3,
            description=(
                "Entrypoint array, run without a shell. Replaces the image's ENTRYPOINT; "
                "$(VAR) references to the container's environment are expanded."
            ),
        ),
        F(
            "args",
            STR_LIST,
            4,
            description=("Arguments to the entrypoint. Replace the image's CMD; $(VAR) references are expanded."),
        ),
        F("workingDir", STR, 5, description=("The container's working directory; defaults to the image's.")),
        F(
            "ports",
            merge_list(ContainerPort, "containerPort", list_type="map", keys=("containerPort", "protocol")),
            6,
            description=(
                "Ports the container exposes. Informational: any port the "
                "container listens on is reachable. Cannot be updated."
            ),
        ),
        F("envFrom", List(EnvFromSource), 19, description=("Sources whose keys become environment variables.")),
        F("env", merge_list(EnvVar, "name"), 7, description=("Environment variables set in the container.")),
        F(
            "resources",
            ResourceRequirements,
            8,
            description=("Compute resources the container requests and is limited to."),
        ),
        F(
            "resizePolicy",
            List(ContainerResizePolicy, "atomic"),
            23,
            description=("How each resource is resized in place."),
        ),
        F(
            "volumeMounts",
            merge_list(VolumeMount, "mountPath"),
            9,
            description=("Pod volumes mounted into the container's filesystem."),
        ),
        F(
            "volumeDevices",
            merge_list(VolumeDevice, "devicePath"),
            21,
            description=("Block devices the container uses."),
        ),
        ptr(
            "livenessProbe",
            Probe,
            10,
            description=("Periodic check of container liveness; the container restarts when it fails."),
        ),
        ptr(
            "readinessProbe",
            Probe,
            11,
            description=("Periodic check of container readiness; the pod leaves service endpoints while it fails."),
        ),
        ptr("startupProbe", Probe, 22, description=("Check that must succeed once before the other probes start.")),
        ptr("lifecycle", Lifecycle, 12, description=("Actions the system takes on container start and stop.")),
        F(
            "terminationMessagePath",
            STR,
            13,
            description=("File the container writes its termination message to. Defaults to /dev/termination-log."),
        ),
        F(
            "terminationMessagePolicy",
            TERMINATION_MESSAGE_POLICY,
            20,
            description=("How the termination message is filled in. Defaults to File."),
        ),
        F(
            "imagePullPolicy",
            PULL_POLICY,
            14,
            description=(
                "When the image is pulled. Defaults to Always for the :latest tag or no tag, IfNotPresent otherwise."
            ),
        ),
        ptr("securityContext", SecurityContext, 15, description=("Security options the container runs with.")),
        F("stdin", BOOL, 16, description=("Allocate a buffer for stdin in the container runtime.")),
        F("stdinOnce", BOOL, 17, description=("Close stdin after the first attach disconnects.")),
        F("tty", BOOL, 18, description=("Allocate a TTY for the container.")),
    ]


Container = S("Container", _container_fields())
EphemeralContainerCommon = S("EphemeralContainerCommon", _container_fields())
EphemeralContainer = S(
    "EphemeralContainer",
    [
        inline(EphemeralContainerCommon, 1),
        F("targetContainerName", STR, 2),
    ],
)

# --- scheduling: affinity, tolerations, topology spread --------------------------------------

NodeSelectorRequirement = S(
    "NodeSelectorRequirement",
    [
        req("key", STR, 1),
        req("operator", enum("DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn"), 2),
        F("values", STR_LIST, 3),
    ],
)

NodeSelectorTerm = S(
    "NodeSelectorTerm",
    [
        F("matchExpressions", List(NodeSelectorRequirement), 1),
        F("matchFields", List(NodeSelectorRequirement), 2),
    ],
    atomic=True,
)

NodeSelector = S(
    "NodeSelector",
    [
        req("nodeSelectorTerms", List(NodeSelectorTerm), 1),
    ],
    atomic=True,
)

TopologySelectorLabelRequirement = S(
    "TopologySelectorLabelRequirement",
    [
        req("key", STR, 1),
        req("values", STR_LIST, 2),
    ],
)

TopologySelectorTerm = S(
    "TopologySelectorTerm",
    [
        F("matchLabelExpressions", List(TopologySelectorLabelRequirement), 1),
    ],
    atomic=True,
)

PreferredSchedulingTerm = S(
    "PreferredSchedulingTerm",
    [
        req("weight", I32, 1),
        req("preference", NodeSelectorTerm, 2),
    ],
)

NodeAffinity = S(
    "NodeAffinity",
    [
        ptr("requiredDuringSchedulingIgnoredDuringExecution", NodeSelector, 1),
        F("preferredDuringSchedulingIgnoredDuringExecution", List(PreferredSchedulingTerm), 2),
    ],
)

PodAffinityTerm = S(
    "PodAffinityTerm",
    [
        ptr("labelSelector", LABEL_SELECTOR, 1),
        F("namespaces", STR_LIST, 2),
        req("topologyKey", STR, 3),
        ptr("namespaceSelector", LABEL_SELECTOR, 4),
    ],
)

WeightedPodAffinityTerm = S(
    "WeightedPodAffinityTerm",
    [
        req("weight", I32, 1),
        req("podAffinityTerm", PodAffinityTerm, 2),
    ],
)

PodAffinity = S(
    "PodAffinity",
    [
        F("requiredDuringSchedulingIgnoredDuringExecution", List(PodAffinityTerm), 1),
        F("preferredDuringSchedulingIgnoredDuringExecution", List(WeightedPodAffinityTerm), 2),
    ],
)

PodAntiAffinity = S(
    "PodAntiAffinity",
    [
        F("requiredDuringSchedulingIgnoredDuringExecution", List(PodAffinityTerm), 1),
        F("preferredDuringSchedulingIgnoredDuringExecution", List(WeightedPodAffinityTerm), 2),
    ],
)

Affinity = S(
    "Affinity",
    [
        ptr("nodeAffinity", NodeAffinity, 1),
        ptr("podAffinity", PodAffinity, 2),
        ptr("podAntiAffinity", PodAntiAffinity, 3),
    ],
)

TAINT_EFFECT = enum("NoExecute", "NoSchedule", "PreferNoSchedule")

Taint = S(
    "Taint",
    [
        req("key", STR, 1),
        F("value", STR, 2),
        req("effect", TAINT_EFFECT, 3),
        ptr("timeAdded", TIME, 4),
    ],
)

Toleration = S(
    "Toleration",
    [
        F("key", STR, 1),
        F("operator", enum("Equal", "Exists"), 2),
        F("value", STR, 3),
        F("effect", TAINT_EFFECT, 4),
        ptr("tolerationSeconds", I64, 5),
    ],
)

PodReadinessGate = S(
    "PodReadinessGate",
    [
        req("conditionType", STR, 1),
    ],
)

NODE_INCLUSION_POLICY = enum("Honor", "Ignore")

TopologySpreadConstraint = S(
    "TopologySpreadConstraint",
    [
        req("maxSkew", I32, 1),
        req("topologyKey", STR, 2),
        req("whenUnsatisfiable", enum("DoNotSchedule", "ScheduleAnyway"), 3),
        ptr("labelSelector", LABEL_SELECTOR, 4),
        ptr("minDomains", I32, 5),
        ptr("nodeAffinityPolicy", NODE_INCLUSION_POLICY, 6),
        ptr("nodeTaintsPolicy", NODE_INCLUSION_POLICY, 7),
        F("matchLabelKeys", STR_ATOMIC, 8),
    ],
)

HostAlias = S(
    "HostAlias",
    [
        F("ip", STR, 1),
        F("hostnames", STR_LIST, 2),
    ],
)

Sysctl = S(
    "Sysctl",
    [
        req("name", STR, 1),
        req("value", STR, 2),
    ],
)

PodSecurityContext = S(
    "PodSecurityContext",
    [
        ptr("seLinuxOptions", SELinuxOptions, 1),
        ptr("windowsOptions", WindowsSecurityContextOptions, 8),
        ptr("runAsUser", I64, 2),
        ptr("runAsGroup", I64, 6),
        ptr("runAsNonRoot", BOOL, 3),
        F("supplementalGroups", List(I64), 4),
        ptr("fsGroup", I64, 5),
        F("sysctls", List(Sysctl), 7),
        ptr("fsGroupChangePolicy", enum("Always", "OnRootMismatch"), 9),
        ptr("seccompProfile", SeccompProfile, 10),
    ],
)

PodDNSConfigOption = S(
    "PodDNSConfigOption",
    [
        F("name", STR, 1),
        ptr("value", STR, 2),
    ],
)

PodDNSConfig = S(
    "PodDNSConfig",
    [
        F("nameservers", STR_LIST, 1),
        F("searches", STR_LIST, 2),
        F("options", List(PodDNSConfigOption), 3),
    ],
)

PodOS = S(
    "PodOS",
    [
        req("name", STR, 1),
    ],
)

PodSchedulingGate = S(
    "PodSchedulingGate",
    [
        req("name", STR, 1),
    ],
)

ClaimSource = S(
    "ClaimSource",
    [
        ptr("resourceClaimName", STR, 1),
        ptr("resourceClaimTemplateName", STR, 2),
    ],
)

PodResourceClaim = S(
    "PodResourceClaim",
    [
        req("name", STR, 1),
        F("source", ClaimSource, 2),
    ],
)

# --- pods ------------------------------------------------------------------------------------

RESTART_POLICY = enum("Always", "Never", "OnFailure")
DNS_POLICY = enum("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")

PodSpec = S(
    "PodSpec",
    [
        F(
            "volumes",
            List(Volume, patch_strategy="merge,retainKeys", patch_merge_key="name"),
            1,
            description="Volumes the pod's containers may mount.",
        ),
        F(
            "initContainers",
            merge_list(Container, "name"),
            20,
            description="Containers run one after another, each to completion, before the main containers start.",
        ),
        req(
            "containers",
            merge_list(Container, "name"),
            2,
            description="The containers of the pod. At least one is required; the list cannot change after creation.",
        ),
        F(
            "ephemeralContainers",
            merge_list(EphemeralContainer, "name"),
            34,
            description="Debugging containers added to a running pod.",
        ),
        F(
            "restartPolicy",
            RESTART_POLICY,
            3,
            description="When containers of the pod are restarted. Defaults to Always.",
        ),
        ptr(
            "terminationGracePeriodSeconds",
            I64,
            4,
            description="Seconds given to the pod to stop after a termination "
            "signal before it is killed. Defaults to 30.",
        ),
        ptr(
            "activeDeadlineSeconds",
            I64,
            5,
            description="Seconds the pod may be active, counted from its start, before the system fails it.",
        ),
        F("dnsPolicy", DNS_POLICY, 6, description="How the pod's DNS is set up. Defaults to ClusterFirst."),
        F("nodeSelector", STR_MAP_ATOMIC, 7, description="Labels a node must carry for the pod to be scheduled to it."),
        F("serviceAccountName", STR, 8, description="The service account the pod runs as."),
        F("serviceAccount", STR, 9, description="Deprecated alias of serviceAccountName."),
        ptr(
            "automountServiceAccountToken",
            BOOL,
            21,
            description="Whether a service account token is mounted into the pod.",
        ),
        F(
            "nodeName",
            STR,
            10,
            description="The node the pod is bound to; set by the scheduler, or by the user to bypass it.",
        ),
        F("hostNetwork", BOOL, 11, description="Use the node's network namespace."),
        F("hostPID", BOOL, 12, description="Use the node's process namespace."),
        F("hostIPC", BOOL, 13, description="Use the node's IPC namespace."),
        ptr("shareProcessNamespace", BOOL, 27),
        ptr(
            "securityContext",
            PodSecurityContext,
            14,
            description="Security attributes applied to every container of the pod.",
        ),
        F(
            "imagePullSecrets",
            merge_list(LocalObjectReference, "name"),
            15,
            description="Secrets used to pull the pod's images.",
        ),
        F("hostname", STR, 16, description="The pod's host name; defaults to the pod name."),
        F("subdomain", STR, 17, description="Sub-domain of the pod's fully qualified host name."),
        ptr("affinity", Affinity, 18, description="Scheduling constraints relative to nodes and other pods."),
        F("schedulerName", STR, 19, description="The scheduler that places the pod."),
        F("tolerations", List(Toleration), 22, description="Taints of nodes the pod tolerates."),
        F("hostAliases", merge_list(HostAlias, "ip"), 23),
        F("priorityClassName", STR, 24, description="The priority class giving the pod its priority."),
        ptr("priority", I32, 25, description="The pod's priority, resolved from priorityClassName by admission."),
        ptr("dnsConfig", PodDNSConfig, 26),
        F("readinessGates", List(PodReadinessGate), 28),
        ptr(
            "runtimeClassName", STR, 29, description="The runtime class selecting the container runtime configuration."
        ),
        ptr("enableServiceLinks", BOOL, 30),
        ptr("preemptionPolicy", enum("Never", "PreemptLowerPriority"), 31),
        F(
            "overhead",
            RESOURCE_LIST,
            32,
            description="Resources consumed by the pod sandbox, on top of the containers' requests.",
        ),
        F(
            "topologySpreadConstraints",
            merge_list(
                TopologySpreadConstraint, "topologyKey", list_type="map", keys=("topologyKey", "whenUnsatisfiable")
            ),
            33,
            description="How the pods of a group spread over topology domains.",
        ),
        ptr("setHostnameAsFQDN", BOOL, 35),
        ptr("os", PodOS, 36, description="The operating system the pod's containers need."),
        ptr("hostUsers", BOOL, 37),
        F("schedulingGates", merge_list(PodSchedulingGate, "name", list_type="map", keys=("name",)), 38),
        F(
            "resourceClaims",
            List(PodResourceClaim, "map", ("name",), patch_strategy="merge,retainKeys", patch_merge_key="name"),
            39,
        ),
    ],
)

PodCondition = S(
    "PodCondition",
    [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
        F("lastProbeTime", TIME, 3),
        F("lastTransitionTime", TIME, 4),
        F("reason", STR, 5),
        F("message", STR, 6),
    ],
)

ContainerStateWaiting = S(
    "ContainerStateWaiting",
    [
        F("reason", STR, 1),
        F("message", STR, 2),
    ],
)

ContainerStateRunning = S(
    "ContainerStateRunning",
    [
        F("startedAt", TIME, 1),
    ],
)

ContainerStateTerminated = S(
    "ContainerStateTerminated",
    [
        req("exitCode", I32, 1),
        F("signal", I32, 2),
        F("reason", STR, 3),
        F("message", STR, 4),
        F("startedAt", TIME, 5),
        F("finishedAt", TIME, 6),
        F("containerID", STR, 7),
    ],
)

ContainerState = S(
    "ContainerState",
    [
        ptr("waiting", ContainerStateWaiting, 1),
        ptr("running", ContainerStateRunning, 2),
        ptr("terminated", ContainerStateTerminated, 3),
    ],
)

ContainerStatus = S(
    "ContainerStatus",
    [
        req("name", STR, 1),
        F("state", ContainerState, 2),
        F("lastState", ContainerState, 3),
        req("ready", BOOL, 4),
        req("restartCount", I32, 5),
        req("image", STR, 6),
        req("imageID", STR, 7),
        F("containerID", STR, 8),
        ptr("started", BOOL, 9),
        # v1.27 (InPlacePodVerticalScaling):
        F("allocatedResources", RESOURCE_LIST, 10),
        ptr("resources", ResourceRequirements, 11),
    ],
)

PodIP = S(
    "PodIP",
    [
        F("ip", STR, 1),
    ],
)

PodStatus = S(
    "PodStatus",
    [
        F("phase", enum("Failed", "Pending", "Running", "Succeeded", "Unknown"), 1),
        F("conditions", merge_list(PodCondition, "type"), 2),
        F("message", STR, 3),
        F("reason", STR, 4),
        F("nominatedNodeName", STR, 11),
        F("hostIP", STR, 5),
        F("podIP", STR, 6),
        F("podIPs", merge_list(PodIP, "ip"), 12),
        ptr("startTime", TIME, 7),
        F("initContainerStatuses", List(ContainerStatus), 10),
        F("containerStatuses", List(ContainerStatus), 8),
        F("qosClass", enum("BestEffort", "Burstable", "Guaranteed"), 9),
        F("ephemeralContainerStatuses", List(ContainerStatus), 13),
        # v1.27 (InPlacePodVerticalScaling):
        F("resize", enum("Deferred", "InProgress", "Infeasible", "Proposed"), 14),
    ],
)

Pod = S(
    "Pod",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", PodSpec, 2, description="The desired behaviour of the pod."),
        F(
            "status",
            PodStatus,
            3,
            description="The most recently observed state of the pod, written by its node agent. Read-only.",
        ),
    ],
)

PodTemplateSpec = S(
    "PodTemplateSpec",
    [
        F("metadata", OBJECT_META, 1, description="Metadata of the pods created from the template."),
        F("spec", PodSpec, 2, description="Specification of the pods created from the template."),
    ],
)

PodTemplate = S(
    "PodTemplate",
    [
        F("metadata", OBJECT_META, 1),
        F("template", PodTemplateSpec, 2),
    ],
)

Binding = S(
    "Binding",
    [
        F("metadata", OBJECT_META, 1),
        req("target", ObjectReference, 2),
    ],
)

# --- replication controllers -----------------------------------------------------------------

ReplicationControllerSpec = S(
    "ReplicationControllerSpec",
    [
        ptr("replicas", I32, 1),
        F("minReadySeconds", I32, 4),
        F("selector", STR_MAP_ATOMIC, 2),
        ptr("template", PodTemplateSpec, 3),
    ],
)

ReplicationControllerCondition = S(
    "ReplicationControllerCondition",
    [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
        F("lastTransitionTime", TIME, 3),
        F("reason", STR, 4),
        F("message", STR, 5),
    ],
)

ReplicationControllerStatus = S(
    "ReplicationControllerStatus",
    [
        req("replicas", I32, 1),
        F("fullyLabeledReplicas", I32, 2),
        F("readyReplicas", I32, 4),
        F("availableReplicas", I32, 5),
        F("observedGeneration", I64, 3),
        F("conditions", merge_list(ReplicationControllerCondition, "type"), 6),
    ],
)

ReplicationController = S(
    "ReplicationController",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ReplicationControllerSpec, 2),
        F("status", ReplicationControllerStatus, 3),
    ],
)

# --- services and endpoints ------------------------------------------------------------------

ClientIPConfig = S(
    "ClientIPConfig",
    [
        ptr("timeoutSeconds", I32, 1),
    ],
)

SessionAffinityConfig = S(
    "SessionAffinityConfig",
    [
        ptr("clientIP", ClientIPConfig, 1),
    ],
)

PortStatus = S(
    "PortStatus",
    [
        req("port", I32, 1),
        req("protocol", PROTOCOL, 2),
        ptr("error", STR, 3),
    ],
)

LoadBalancerIngress = S(
    "LoadBalancerIngress",
    [
        F("ip", STR, 1),
        F("hostname", STR, 2),
        F("ports", List(PortStatus, "atomic"), 4),
    ],
)

LoadBalancerStatus = S(
    "LoadBalancerStatus",
    [
        F("ingress", List(LoadBalancerIngress), 1),
    ],
)

ServicePort = S(
    "ServicePort",
    [
        F("name", STR, 1, description="Name of the port, required when the service has several."),
        F("protocol", PROTOCOL, 2, default="TCP", description="Protocol of the port. Defaults to TCP."),
        ptr("appProtocol", STR, 6),
        req("port", I32, 3, description="The port the service listens on."),
        F("targetPort", IOS, 4, description="Number or name of the port on the pods. Defaults to port."),
        F("nodePort", I32, 5, description="The port on every node for NodePort and LoadBalancer services."),
    ],
)

IP_FAMILY = enum("IPv4", "IPv6")
TRAFFIC_POLICY = enum("Cluster", "Local")

ServiceSpec = S(
    "ServiceSpec",
    [
        F(
            "ports",
            merge_list(ServicePort, "port", list_type="map", keys=("port", "protocol")),
            1,
            description="The ports the service exposes.",
        ),
        F("selector", STR_MAP_ATOMIC, 2, description="Labels of the pods traffic is routed to."),
        F(
            "clusterIP",
            STR,
            3,
            description="The service's virtual IP, allocated by the server "
            "unless given; None makes a headless service.",
        ),
        F("clusterIPs", STR_ATOMIC, 18),
        F(
            "type",
            enum("ClusterIP", "ExternalName", "LoadBalancer", "NodePort"),
            4,
            description="How the service is exposed: ClusterIP (the default), NodePort, LoadBalancer or ExternalName.",
        ),
        F("externalIPs", STR_LIST, 5),
        F(
            "sessionAffinity",
            enum("ClientIP", "None"),
            7,
            description="ClientIP keeps a client on one endpoint. Defaults to None.",
        ),
        F("loadBalancerIP", STR, 8),
        F("loadBalancerSourceRanges", STR_LIST, 9),
        F("externalName", STR, 10),
        F("externalTrafficPolicy", TRAFFIC_POLICY, 11),
        F("healthCheckNodePort", I32, 12),
        F("publishNotReadyAddresses", BOOL, 13),
        ptr("sessionAffinityConfig", SessionAffinityConfig, 14),
        F("ipFamilies", List(IP_FAMILY, "atomic"), 19),
        ptr("ipFamilyPolicy", enum("PreferDualStack", "RequireDualStack", "SingleStack"), 17),
        ptr("allocateLoadBalancerNodePorts", BOOL, 20),
        ptr("loadBalancerClass", STR, 21),
        ptr("internalTrafficPolicy", TRAFFIC_POLICY, 22),
    ],
)

ServiceStatus = S(
    "ServiceStatus",
    [
        F("loadBalancer", LoadBalancerStatus, 1),
        F("conditions", merge_list(CONDITION, "type", list_type="map", keys=("type",)), 2),
    ],
)

Service = S(
    "Service",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ServiceSpec, 2),
        F("status", ServiceStatus, 3),
    ],
)

ServiceAccount = S(
    "ServiceAccount",
    [
        F("metadata", OBJECT_META, 1),
        F("secrets", merge_list(ObjectReference, "name"), 2),
        F("imagePullSecrets", List(LocalObjectReference), 3),
        ptr("automountServiceAccountToken", BOOL, 4),
    ],
)

EndpointAddress = S(
    "EndpointAddress",
    [
        req("ip", STR, 1),
        F("hostname", STR, 3),
        ptr("nodeName", STR, 4),
        ptr("targetRef", ObjectReference, 2),
    ],
    atomic=True,
)

EndpointPort = S(
    "EndpointPort",
    [
        F("name", STR, 1),
        req("port", I32, 2),
        F("protocol", PROTOCOL, 3),
        ptr("appProtocol", STR, 4),
    ],
    atomic=True,
)

EndpointSubset = S(
    "EndpointSubset",
    [
        F("addresses", List(EndpointAddress), 1),
        F("notReadyAddresses", List(EndpointAddress), 2),
        F("ports", List(EndpointPort), 3),
    ],
)

Endpoints = S(
    "Endpoints",
    [
        F("metadata", OBJECT_META, 1),
        F("subsets", List(EndpointSubset), 2),
    ],
)

# --- nodes -----------------------------------------------------------------------------------

ConfigMapNodeConfigSource = S(
    "ConfigMapNodeConfigSource",
    [
        req("namespace", STR, 1),
        req("name", STR, 2),
        F("uid", STR, 3),
        F("resourceVersion", STR, 4),
        req("kubeletConfigKey", STR, 5),
    ],
)

NodeConfigSource = S(
    "NodeConfigSource",
    [
        ptr("configMap", ConfigMapNodeConfigSource, 2),
    ],
)

NodeSpec = S(
    "NodeSpec",
    [
        F("podCIDR", STR, 1),
        F("podCIDRs", List(STR, patch_strategy="merge"), 7),
        F("providerID", STR, 3),
        F("unschedulable", BOOL, 4),
        F("taints", List(Taint), 5),
        ptr("configSource", NodeConfigSource, 6),
        F("externalID", STR, 2),
    ],
)

DaemonEndpoint = S(
    "DaemonEndpoint",
    [
        req("Port", I32, 1),
    ],
)

NodeDaemonEndpoints = S(
    "NodeDaemonEndpoints",
    [
        F("kubeletEndpoint", DaemonEndpoint, 1),
    ],
)

NodeSystemInfo = S(
    "NodeSystemInfo",
    [
        req("machineID", STR, 1),
        req("systemUUID", STR, 2),
        req("bootID", STR, 3),
        req("kernelVersion", STR, 4),
        req("osImage", STR, 5),
        req("containerRuntimeVersion", STR, 6),
        req("kubeletVersion", STR, 7),
        req("kubeProxyVersion", STR, 8),
        req("operatingSystem", STR, 9),
        req("architecture", STR, 10),
    ],
)

NodeConfigStatus = S(
    "NodeConfigStatus",
    [
        ptr("assigned", NodeConfigSource, 1),
        ptr("active", NodeConfigSource, 2),
        ptr("lastKnownGood", NodeConfigSource, 3),
        F("error", STR, 4),
    ],
)

NodeCondition = S(
    "NodeCondition",
    [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
        F("lastHeartbeatTime", TIME, 3),
        F("lastTransitionTime", TIME, 4),
        F("reason", STR, 5),
        F("message", STR, 6),
    ],
)

NodeAddress = S(
    "NodeAddress",
    [
        req("type", STR, 1),
        req("address", STR, 2),
    ],
)

ContainerImage = S(
    "ContainerImage",
    [
        F("names", STR_LIST, 1),
        F("sizeBytes", I64, 2),
    ],
)

AttachedVolume = S(
    "AttachedVolume",
    [
        req("name", STR, 1),
        req("devicePath", STR, 2),
    ],
)

NodeStatus = S(
    "NodeStatus",
    [
        F("capacity", RESOURCE_LIST, 1),
        F("allocatable", RESOURCE_LIST, 2),
        F("phase", enum("Pending", "Running", "Terminated"), 3),
        F("conditions", merge_list(NodeCondition, "type"), 4),
        F("addresses", merge_list(NodeAddress, "type"), 5),
        F("daemonEndpoints", NodeDaemonEndpoints, 6),
        F("nodeInfo", NodeSystemInfo, 7),
        F("images", List(ContainerImage), 8),
        F("volumesInUse", STR_LIST, 9),
        F("volumesAttached", List(AttachedVolume), 10),
        ptr("config", NodeConfigStatus, 11),
    ],
)

Node = S(
    "Node",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", NodeSpec, 2),
        F("status", NodeStatus, 3),
    ],
)

# --- namespaces, config maps, secrets --------------------------------------------------------

NamespaceSpec = S(
    "NamespaceSpec",
    [
        F("finalizers", STR_LIST, 1),
    ],
)

NamespaceCondition = S(
    "NamespaceCondition",
    [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
        F("lastTransitionTime", TIME, 4),
        F("reason", STR, 5),
        F("message", STR, 6),
    ],
)

NamespaceStatus = S(
    "NamespaceStatus",
    [
        F("phase", enum("Active", "Terminating"), 1),
        F("conditions", merge_list(NamespaceCondition, "type"), 2),
    ],
)

Namespace = S(
    "Namespace",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", NamespaceSpec, 2),
        F("status", NamespaceStatus, 3),
    ],
)

ConfigMap = S(
    "ConfigMap",
    [
        F("metadata", OBJECT_META, 1),
        ptr("immutable", BOOL, 4, description="When true, data cannot be updated; the object can only be deleted."),
        F("data", STR_MAP, 2, description="Configuration values by key (UTF-8 text)."),
        F("binaryData", Map(BYTES), 3, description="Binary configuration values by key, base64 encoded."),
    ],
)

Secret = S(
    "Secret",
    [
        F("metadata", OBJECT_META, 1),
        ptr("immutable", BOOL, 5, description="When true, data cannot be updated; the object can only be deleted."),
        F("data", Map(BYTES), 2, description="Secret values by key, base64 encoded."),
        F(
            "stringData",
            STR_MAP,
            4,
            description="Write-only convenience: plain string values merged into data on write.",
        ),
        F("type", STR, 3, description="Type of the secret, for programmatic handling."),
    ],
)

# --- events (core/v1) ------------------------------------------------------------------------

EventSource = S(
    "EventSource",
    [
        F("component", STR, 1),
        F("host", STR, 2),
    ],
)

EventSeries = S(
    "EventSeries",
    [
        F("count", I32, 1),
        F("lastObservedTime", MICROTIME, 2),
    ],
)

Event = S(
    "Event",
    [
        req("metadata", OBJECT_META, 1),
        req("involvedObject", ObjectReference, 2),
        F("reason", STR, 3),
        F("message", STR, 4),
        F("source", EventSource, 5),
        F("firstTimestamp", TIME, 6),
        F("lastTimestamp", TIME, 7),
        F("count", I32, 8),
        F("type", STR, 9),
        F("eventTime", MICROTIME, 10),
        ptr("series", EventSeries, 11),
        F("action", STR, 12),
        ptr("related", ObjectReference, 13),
        F("reportingComponent", STR, 14),
        F("reportingInstance", STR, 15),
    ],
)

# --- limit ranges and quotas -----------------------------------------------------------------

LimitRangeItem = S(
    "LimitRangeItem",
    [
        req("type", STR, 1),
        F("max", RESOURCE_LIST, 2),
        F("min", RESOURCE_LIST, 3),
        F("default", RESOURCE_LIST, 4),
        F("defaultRequest", RESOURCE_LIST, 5),
        F("maxLimitRequestRatio", RESOURCE_LIST, 6),
    ],
)

LimitRangeSpec = S(
    "LimitRangeSpec",
    [
        req("limits", List(LimitRangeItem), 1),
    ],
)

LimitRange = S(
    "LimitRange",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", LimitRangeSpec, 2),
    ],
)

QUOTA_SCOPE = enum(
    "BestEffort", "CrossNamespacePodAffinity", "NotBestEffort", "NotTerminating", "PriorityClass", "Terminating"
)

ScopedResourceSelectorRequirement = S(
    "ScopedResourceSelectorRequirement",
    [
        req("scopeName", QUOTA_SCOPE, 1),
        req("operator", enum("DoesNotExist", "Exists", "In", "NotIn"), 2),
        F("values", STR_LIST, 3),
    ],
)

ScopeSelector = S(
    "ScopeSelector",
    [
        F("matchExpressions", List(ScopedResourceSelectorRequirement), 1),
    ],
    atomic=True,
)

ResourceQuotaSpec = S(
    "ResourceQuotaSpec",
    [
        F("hard", RESOURCE_LIST, 1),
        F("scopes", List(QUOTA_SCOPE), 2),
        ptr("scopeSelector", ScopeSelector, 3),
    ],
)

ResourceQuotaStatus = S(
    "ResourceQuotaStatus",
    [
        F("hard", RESOURCE_LIST, 1),
        F("used", RESOURCE_LIST, 2),
    ],
)

ResourceQuota = S(
    "ResourceQuota",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ResourceQuotaSpec, 2),
        F("status", ResourceQuotaStatus, 3),
    ],
)

# --- persistent volumes and claims -----------------------------------------------------------

PersistentVolumeSource = S(
    "PersistentVolumeSource",
    [
        ptr("gcePersistentDisk", GCEPersistentDiskVolumeSource, 1),
        ptr("awsElasticBlockStore", AWSElasticBlockStoreVolumeSource, 2),
        ptr("hostPath", HostPathVolumeSource, 3),
        ptr("glusterfs", GlusterfsPersistentVolumeSource, 4),
        ptr("nfs", NFSVolumeSource, 5),
        ptr("rbd", RBDPersistentVolumeSource, 6),
        ptr("iscsi", ISCSIPersistentVolumeSource, 7),
        ptr("cinder", CinderPersistentVolumeSource, 8),
        ptr("cephfs", CephFSPersistentVolumeSource, 9),
        ptr("fc", FCVolumeSource, 10),
        ptr("flocker", FlockerVolumeSource, 11),
        ptr("flexVolume", FlexPersistentVolumeSource, 12),
        ptr("azureFile", AzureFilePersistentVolumeSource, 13),
        ptr("vsphereVolume", VsphereVirtualDiskVolumeSource, 14),
        ptr("quobyte", QuobyteVolumeSource, 15),
        ptr("azureDisk", AzureDiskVolumeSource, 16),
        ptr("photonPersistentDisk", PhotonPersistentDiskVolumeSource, 17),
        ptr("portworxVolume", PortworxVolumeSource, 18),
        ptr("scaleIO", ScaleIOPersistentVolumeSource, 19),
        ptr("local", LocalVolumeSource, 20),
        ptr("storageos", StorageOSPersistentVolumeSource, 21),
        ptr("csi", CSIPersistentVolumeSource, 22),
    ],
)

VolumeNodeAffinity = S(
    "VolumeNodeAffinity",
    [
        ptr("required", NodeSelector, 1),
    ],
)

PersistentVolumeSpec = S(
    "PersistentVolumeSpec",
    [
        F("capacity", RESOURCE_LIST, 1),
        inline(PersistentVolumeSource, 2),
        F("accessModes", List(ACCESS_MODE), 3),
        # upstream: +structType=granular on this one field (ObjectReference is atomic elsewhere)
        ptr("claimRef", ObjectReference, 4, map_type="granular"),
        F("persistentVolumeReclaimPolicy", enum("Delete", "Recycle", "Retain"), 5),
        F("storageClassName", STR, 6),
        F("mountOptions", STR_LIST, 7),
        ptr("volumeMode", VOLUME_MODE, 8),
        ptr("nodeAffinity", VolumeNodeAffinity, 9),
    ],
)

PersistentVolumeStatus = S(
    "PersistentVolumeStatus",
    [
        F("phase", enum("Available", "Bound", "Failed", "Pending", "Released"), 1),
        F("message", STR, 2),
        F("reason", STR, 3),
    ],
)

PersistentVolume = S(
    "PersistentVolume",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", PersistentVolumeSpec, 2),
        F("status", PersistentVolumeStatus, 3),
    ],
)

PersistentVolumeClaimCondition = S(
    "PersistentVolumeClaimCondition",
    [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
        F("lastProbeTime", TIME, 3),
        F("lastTransitionTime", TIME, 4),
        F("reason", STR, 5),
        F("message", STR, 6),
    ],
)

PersistentVolumeClaimStatus = S(
    "PersistentVolumeClaimStatus",
    [
        F("phase", enum("Bound", "Lost", "Pending"), 1),
        F("accessModes", List(ACCESS_MODE), 2),
        F("capacity", RESOURCE_LIST, 3),
        F("conditions", merge_list(PersistentVolumeClaimCondition, "type"), 4),
        F("allocatedResources", RESOURCE_LIST, 5),
        ptr(
            "resizeStatus",
            enum(
                "",
                "ControllerExpansionFailed",
                "ControllerExpansionInProgress",
                "NodeExpansionFailed",
                "NodeExpansionInProgress",
                "NodeExpansionPending",
            ),
            6,
        ),
    ],
)

PersistentVolumeClaim = S(
    "PersistentVolumeClaim",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", PersistentVolumeClaimSpec, 2),
        F("status", PersistentVolumeClaimStatus, 3),
    ],
)

# --- kinds -----------------------------------------------------------------------------------

KINDS = {
    "Pod": Pod,
    "Node": Node,
    "Namespace": Namespace,
    "Service": Service,
    "Endpoints": Endpoints,
    "ConfigMap": ConfigMap,
    "Secret": Secret,
    "ServiceAccount": ServiceAccount,
    "Event": Event,
    "LimitRange": LimitRange,
    "ResourceQuota": ResourceQuota,
    "PersistentVolume": PersistentVolume,
    "PersistentVolumeClaim": PersistentVolumeClaim,
    "PodTemplate": PodTemplate,
    "ReplicationController": ReplicationController,
    "Binding": Binding,
}

# Options kinds of the proxy sub-resources (query parameters; declared so that every
# sub-resource kind the registry names has a schema).
NodeProxyOptions = S("NodeProxyOptions", [F("path", STR, 1)])
ServiceProxyOptions = S("ServiceProxyOptions", [F("path", STR, 1)])
PodProxyOptions = S("PodProxyOptions", [F("path", STR, 1)])
PodExecOptions = S(
    "PodExecOptions",
    [
        F("stdin", BOOL, 1),
        F("stdout", BOOL, 2),
        F("stderr", BOOL, 3),
        F("tty", BOOL, 4),
        F("container", STR, 5),
        F("command", STR_LIST, 6),
    ],
)
PodAttachOptions = S(
    "PodAttachOptions",
    [F("stdin", BOOL, 1), F("stdout", BOOL, 2), F("stderr", BOOL, 3), F("tty", BOOL, 4), F("container", STR, 5)],
)
PodPortForwardOptions = S("PodPortForwardOptions", [F("ports", List(I32), 1)])

KINDS.update(
    {
        "NodeProxyOptions": NodeProxyOptions,
        "ServiceProxyOptions": ServiceProxyOptions,
        "PodProxyOptions": PodProxyOptions,
        "PodExecOptions": PodExecOptions,
        "PodAttachOptions": PodAttachOptions,
        "PodPortForwardOptions": PodPortForwardOptions,
    }
)
