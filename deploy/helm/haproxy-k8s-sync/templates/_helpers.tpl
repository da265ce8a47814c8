{{/* Name of every object of the release: fullnameOverride, else the
release name when it holds the chart's, else RELEASE-haproxy-k8s-sync. */}}
{{- define "hks.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hks.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "hks.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The CronJob's pods: named apart, as in deploy/, so that the
Deployment's, Service's and PodDisruptionBudget's selectors never take them. */}}
{{- define "hks.triggerSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-trigger
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hks.ingressNamespace" -}}
{{- default .Release.Namespace .Values.ingress.namespace -}}
{{- end -}}

{{/* WEBHOOK_AUTH: token mode is spelled out; a token needs a Secret. */}}
{{- define "hks.webhookAuth" -}}
{{- $a := .Values.webhook.auth -}}
{{- if not (has $a (list "token" "kubernetes" "none")) -}}
{{- fail "webhook.auth must be token, kubernetes or none" -}}
{{- end -}}
{{- if and (eq $a "token") (not .Values.secret.existingSecret) (not .Values.secret.create) -}}
{{- fail "webhook.auth token needs WEBHOOK_TOKEN: set secret.existingSecret, or secret.create=true" -}}
{{- end -}}
{{- $a -}}
{{- end -}}

{{/* WEBHOOK_ALLOWED_SERVICEACCOUNTS, with the CronJob's own in kubernetes mode.
Anyone who may create a pod can have a token issued for any audience: with the
default audience, an empty list (anyone) is refused. */}}
{{- define "hks.allowedServiceAccounts" -}}
{{- $sas := .Values.webhook.allowedServiceAccounts -}}
{{- if and (eq .Values.webhook.auth "kubernetes") .Values.cronJob.enabled -}}
{{- $sas = append $sas (printf "%s/%s-trigger" .Release.Namespace (include "hks.fullname" .)) -}}
{{- end -}}
{{- if and (eq .Values.webhook.auth "kubernetes") (not $sas) (eq .Values.webhook.audience "haproxy-k8s-sync") -}}
{{- fail "webhook.auth=kubernetes: list the callers in webhook.allowedServiceAccounts (namespace/name), enable cronJob (its ServiceAccount is listed), or set a webhook.audience of your own: with the default audience and nobody listed, anyone who may create a pod could call" -}}
{{- end -}}
{{- join "," $sas -}}
{{- end -}}

{{/* The runtime API driver alone has no versions to make writers safe together.
A URL the user did not give is never rendered: a placeholder would send the
service to an HAProxy that is not there. */}}
{{- define "hks.checkReplicas" -}}
{{- if not (or .Values.haproxy.dataplaneURL .Values.haproxy.runtimeURL) -}}
{{- fail "set haproxy.dataplaneURL and haproxy.runtimeURL (recommended: each HAProxy's Data Plane API and admin socket, same order), or haproxy.runtimeURL alone with replicaCount 1" -}}
{{- end -}}
{{- if and (not .Values.haproxy.dataplaneURL) .Values.haproxy.runtimeURL (gt (int .Values.replicaCount) 1) -}}
{{- fail "the runtime API driver alone (haproxy.runtimeURL without haproxy.dataplaneURL) needs replicaCount 1: its writes carry no version" -}}
{{- end -}}
{{- $tls := contains "tls://" (include "hks.list" .Values.haproxy.runtimeURL) -}}
{{- if and $tls (not .Values.haproxy.runtimeTLS.secretName) -}}
{{- fail "tls:// in haproxy.runtimeURL needs haproxy.runtimeTLS.secretName (a Secret with ca.crt, tls.crt and tls.key): the service refuses to start without the files" -}}
{{- end -}}
{{- if and (not $tls) (or .Values.haproxy.runtimeTLS.secretName .Values.haproxy.runtimeTLS.serverName) -}}
{{- fail "haproxy.runtimeTLS is set but no haproxy.runtimeURL is tls://host:port" -}}
{{- end -}}
{{- end -}}

{{- define "hks.secretName" -}}
{{- default (include "hks.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{- /*
The default repository is where the release workflow publishes the image.
A placeholder (none, or a host of the reserved example domains, as the docs
write registry.example.com) would install into ImagePullBackOff: refuse it,
naming the value.
*/ -}}
{{- define "hks.image" -}}
{{- $repo := toString .Values.image.repository -}}
{{- if or (not .Values.image.repository) (regexMatch "^([^/]*\\.)?example(\\.(com|net|org))?(:[0-9]+)?/" $repo) -}}
{{- fail (printf "image.repository is the placeholder %q: set image.repository to the registry you pushed make image's image to, or leave the default, the release workflow's (docs/install.md, The image)" $repo) -}}
{{- end -}}
{{- $tag := default .Chart.AppVersion (toString .Values.image.tag) -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag must name a release, not latest" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{- define "hks.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hks.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required with serviceAccount.create=false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The container shared by the Deployment and the CronJob; arg: the command. */}}
{{- define "hks.container" -}}
image: {{ include "hks.image" .root }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
args: [{{ .command | quote }}]
env:
  - name: INGRESS_NAMESPACE
    value: {{ include "hks.ingressNamespace" .root | quote }}
  {{- with .root.Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
envFrom:
  - configMapRef:
      name: {{ include "hks.fullname" .root }}
  {{- if or .root.Values.secret.create .root.Values.secret.existingSecret }}
  - secretRef:
      name: {{ include "hks.secretName" .root }}
  {{- end }}
resources:
  {{- toYaml .root.Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
{{- if or .root.Values.haproxy.caConfigMap .root.Values.haproxy.runtimeTLS.secretName .root.Values.extraVolumeMounts }}
volumeMounts:
  {{- if .root.Values.haproxy.caConfigMap }}
  - name: ca
    mountPath: /etc/haproxy-k8s-sync/ca
    readOnly: true
  {{- end }}
  {{- if .root.Values.haproxy.runtimeTLS.secretName }}
  - name: runtime-tls
    mountPath: /etc/haproxy-k8s-sync/runtime-tls
    readOnly: true
  {{- end }}
  {{- with .root.Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{- define "hks.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if or .Values.haproxy.caConfigMap .Values.haproxy.runtimeTLS.secretName .Values.extraVolumes }}
volumes:
  {{- with .Values.haproxy.caConfigMap }}
  - name: ca
    configMap:
      name: {{ . }}
  {{- end }}
  {{- with .Values.haproxy.runtimeTLS.secretName }}
  - name: runtime-tls
    secret:
      secretName: {{ . }}
  {{- end }}
  {{- with .Values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* A duration such as 15m, 1h or 90s, in seconds, for PromQL. */}}
{{- define "hks.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "h" $d -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int }}
{{- else -}}{{ fail (printf "%q: want a duration in s, m or h" $d) }}
{{- end -}}
{{- end -}}

{{/* A list value, or a comma-separated string, as a comma-separated string. */}}
{{- define "hks.list" -}}
{{- if kindIs "slice" . -}}{{ join "," . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}
