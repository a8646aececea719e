{{/* Prefix of every resource name: <release>-parley, or the release name when it contains "parley". */}}
{{- define "parley.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "parley" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-parley" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The services this chart can run, in a fixed order. */}}
{{- define "parley.serviceNames" -}}
{{- list "rooms" "registry" "governance" "consent" "mcp" "gateway" | toJson -}}
{{- end -}}

{{/* The enabled services, as a JSON list. */}}
{{- define "parley.enabledServices" -}}
{{- $out := list -}}
{{- range $name := include "parley.serviceNames" . | fromJsonArray -}}
{{- if (index $.Values $name).enabled -}}
{{- $out = append $out $name -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{- define "parley.selectorLabels" -}}
app.kubernetes.io/name: parley
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "parley.labels" -}}
{{ include "parley.selectorLabels" . }}
app.kubernetes.io/part-of: parley
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "parley.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}

{{- define "parley.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "parley.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The name the NATS chart gives its Service (its nats.fullname). */}}
{{- define "parley.natsFullname" -}}
{{- $nats := .Values.nats -}}
{{- if $nats.fullnameOverride -}}
{{- $nats.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "nats" $nats.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of the NATS chart's server pods. */}}
{{- define "parley.natsSelectorLabels" -}}
app.kubernetes.io/name: {{ default "nats" .Values.nats.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nats
{{- end -}}

{{- define "parley.natsUrl" -}}
{{- if .Values.nats.enabled -}}
{{- printf "nats://%s.%s.svc:4222" (include "parley.natsFullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "externalNats.url is required when nats.enabled=false" .Values.externalNats.url -}}
{{- end -}}
{{- end -}}

{{/* The Secret the services read their creds (and governance its keys) from. */}}
{{- define "parley.credsSecret" -}}
{{- if .Values.nats.enabled -}}
{{- .Values.keys.secretName -}}
{{- else -}}
{{- required "externalNats.credsSecret is required when nats.enabled=false" .Values.externalNats.credsSecret -}}
{{- end -}}
{{- end -}}

{{/* Volumes every service pod mounts: its own creds file and, for seeding, state.json. */}}
{{- define "parley.credsVolumes" -}}
- name: nats-creds
  secret:
    secretName: {{ include "parley.credsSecret" .ctx }}
    defaultMode: 0400
    items:
      - key: {{ printf "svc-%s.creds" .component }}
        path: nats.creds
      {{- /* The least-privilege connection requests are answered on (publish _INBOX.> only). */}}
      - key: {{ printf "svc-%s-responder.creds" .component }}
        path: responder.creds
- name: parley-state
  secret:
    secretName: {{ include "parley.credsSecret" .ctx }}
    optional: true
    defaultMode: 0400
    items:
      - key: state.json
        path: state.json
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "parley.credsMounts" -}}
- name: nats-creds
  mountPath: /etc/parley/nats
  readOnly: true
- name: parley-state
  mountPath: /etc/parley/state
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The environment every Parley process of a service gets. */}}
{{- define "parley.commonEnv" -}}
- name: NATS_URL
  value: {{ include "parley.natsUrl" .ctx | quote }}
- name: NATS_CREDS
  value: /etc/parley/nats/nats.creds
- name: LOG_LEVEL
  value: {{ .ctx.Values.logLevel | quote }}
- name: PARLEY_REPLICAS
  value: {{ .ctx.Values.backbone.replicas | quote }}
- name: PARLEY_PARTITIONS
  value: {{ .ctx.Values.backbone.partitions | quote }}
{{- end -}}

{{/* Egress of a Parley pod: DNS, NATS clients port (to the chart's NATS pods or externalNatsTo), OTLP. */}}
{{- define "parley.egress" -}}
{{- $ := .ctx -}}
- ports:
    - { port: 53, protocol: UDP }
    - { port: 53, protocol: TCP }
- ports:
    - { port: 4222, protocol: TCP }
  {{- if $.Values.nats.enabled }}
  to:
    - podSelector:
        matchLabels:
          {{- include "parley.natsSelectorLabels" $ | nindent 10 }}
  {{- else if $.Values.networkPolicy.externalNatsTo }}
  to:
    {{- toYaml $.Values.networkPolicy.externalNatsTo | nindent 4 }}
  {{- end }}
{{- if $.Values.telemetry.otlpEndpoint }}
- ports:
    {{- range $.Values.networkPolicy.otlpPorts }}
    - { port: {{ . }}, protocol: TCP }
    {{- end }}
{{- end -}}
{{- end }}
